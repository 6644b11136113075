#pragma once
// Command-line parser of the benchmark executables, behaving like CK's ck_tile::ArgParser (which AITER's benchmarks
// use): flags are `-key=value` only, keys are declared with insert(key, default, help) and printed by `-?` in
// insertion order. Header-only, no CUDA. Used by benchmark_mha_fwd.cpp (and the bwd benchmark).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace bench {

class ArgParser
{
public:
    ArgParser& insert(const std::string& key, const std::string& default_value, const std::string& help)
    {
        if (args_.count(key) == 0)
            keys_.push_back(key);
        args_[key] = Arg{default_value, help};
        return *this;
    }

    // Layout: the key right-aligned so that every key ends in column 1 + max_key, four spaces, the help text with
    // " (default:<v>)" after its first line; later help lines start in the same column as the first one.
    void print_help() const
    {
        std::string::size_type max_key = kMinKeyWidth;
        for (const auto& key : keys_)
            max_key = key.size() > max_key ? key.size() : max_key;

        std::cout << "args:" << std::endl;
        for (const auto& key : keys_)
        {
            const Arg& arg = args_.at(key);
            const std::vector<std::string> lines = split(arg.help, '\n');
            std::cout << std::setw(static_cast<int>(1 + max_key - key.size())) << "-" << key << std::setw(4) << " "
                      << lines[0] << " (default:" << arg.value << ")" << std::endl;
            for (size_t i = 1; i < lines.size(); ++i)
                std::cout << std::setw(static_cast<int>(1 + max_key + 4)) << " " << lines[i] << std::endl;
        }
    }

    // False on `-?` (after printing the help) and on any malformed or unknown argument (after saying why).
    bool parse(int argc, char* argv[], int start_index = 1)
    {
        for (int i = start_index; i < argc; ++i)
        {
            const char* token = argv[i];
            if (token[0] != '-')
            {
                std::printf("illegal input\n");
                print_help();
                return false;
            }
            const std::string text(token + 1);
            if (text == "?")
            {
                print_help();
                return false;
            }
            const auto eq = text.find('=');
            if (eq == std::string::npos)
            {
                std::printf("arg should be [key]=[value] pair, here:%s\n", text.c_str());
                return false;
            }
            if (eq + 1 >= text.size())
            {
                std::printf("cant find value after \"=\", here:%s\n", text.c_str());
                return false;
            }
            const std::string key = text.substr(0, eq);
            auto it               = args_.find(key);
            if (it == args_.end())
            {
                std::printf("no such arg:%s\n", key.c_str());
                return false;
            }
            it->second.value = text.substr(eq + 1);
        }
        return true;
    }

    std::string get_str(const std::string& key) const { return args_.at(key).value; }

    // atoi semantics on purpose: "16," reads as 16, garbage reads as 0 (as in CK).
    int get_int(const std::string& key) const { return std::atoi(get_str(key).c_str()); }

    uint32_t get_uint32(const std::string& key) const
    {
        return static_cast<uint32_t>(std::strtoul(get_str(key).c_str(), nullptr, 10));
    }

    uint64_t get_uint64(const std::string& key) const
    {
        return static_cast<uint64_t>(std::strtoull(get_str(key).c_str(), nullptr, 10));
    }

    // "t"/"true" and "f"/"false", otherwise any non-zero integer is true.
    bool get_bool(const std::string& key) const
    {
        const std::string v = get_str(key);
        if (v == "t" || v == "true")
            return true;
        if (v == "f" || v == "false")
            return false;
        return std::atoi(v.c_str()) != 0;
    }

    float get_float(const std::string& key) const { return static_cast<float>(std::atof(get_str(key).c_str())); }

    // Comma-separated integers: "-s=128,64,1" -> {128, 64, 1}; empty items are skipped.
    std::vector<int32_t> get_int_vec(const std::string& key) const
    {
        std::vector<int32_t> out;
        for (const auto& item : split(get_str(key), ','))
            if (!item.empty())
                out.push_back(static_cast<int32_t>(std::atoi(item.c_str())));
        return out;
    }

private:
    struct Arg
    {
        std::string value;
        std::string help;
    };

    static constexpr std::string::size_type kMinKeyWidth = 11; // CK pads keys to at least this width

    static std::vector<std::string> split(const std::string& s, char sep)
    {
        std::vector<std::string> parts;
        std::string::size_type begin = 0;
        for (auto pos = s.find(sep); pos != std::string::npos; pos = s.find(sep, begin))
        {
            parts.push_back(s.substr(begin, pos - begin));
            begin = pos + 1;
        }
        parts.push_back(s.substr(begin));
        return parts;
    }

    std::map<std::string, Arg> args_;
    std::vector<std::string> keys_; // insertion order, for the help
};

} // namespace bench
