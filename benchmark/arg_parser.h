#pragma once
// Command line of the benchmark executables: ArgParser behaves like CK's ck_tile::ArgParser (which AITER's benchmarks
// use): flags are `-key=value` only, keys are declared with insert(key, default, help) and printed by `-?` in
// insertion order. Below it, the value grammars both MHA benchmarks share, as CK decodes them: -mask (MaskInfo),
// -bias (BiasInfo) and enum-like flags (decode_name). Header-only; needs only ck_tile_compat.h for the enums.

#include "ck_tile_compat.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <initializer_list>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
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

    bool has(const std::string& key) const { return args_.count(key) != 0; }

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

// CK's mask_info: the -mask grammar decoded into (mask_type, window_size_left, window_size_right, sink_size). For
// 'g:y,x' (window_generic) left/right carry y/x, as in CK. An optional third number of 't:l,r,s', 'b:l,r,s' and
// 'g:y,x,s' is the sink size (keys [0, s) stay visible left of the window).
struct MaskInfo
{
    mask_enum type = mask_enum::no_mask;
    int left       = -1;
    int right      = -1;
    int sink_size  = 0;

    static bool decode(const std::string& str, MaskInfo& m)
    {
        m            = MaskInfo{};
        const auto c = str.find(':');
        if (c == std::string::npos)
        {
            if (str == "0")
                return true;
            if (str == "1" || str == "t" || str == "2" || str == "b")
            {
                m.type  = (str == "1" || str == "t") ? mask_enum::mask_top_left : mask_enum::mask_bottom_right;
                m.right = 0; // causal: (-1, 0)
                return true;
            }
            return false;
        }
        const std::string t = str.substr(0, c);
        const std::string v = str.substr(c + 1);
        if (t == "xt" || t == "xb") // xformers window w: w < 0 causal, else w/2 keys left and w-1-w/2 right
        {
            const int window = std::atoi(v.c_str());
            m.type           = t == "xt" ? mask_enum::mask_top_left : mask_enum::mask_bottom_right;
            m.left           = -1;
            m.right          = 0;
            if (window > 0)
            {
                m.left  = window / 2;
                m.right = window - 1 - m.left;
            }
            return true;
        }
        const auto comma = v.find(',');
        if (comma == std::string::npos || (t != "t" && t != "b" && t != "g"))
            return false;
        m.type  = t == "t" ? mask_enum::mask_top_left
                  : t == "b" ? mask_enum::mask_bottom_right
                             : mask_enum::window_generic;
        m.left             = std::atoi(v.substr(0, comma).c_str());
        const auto comma_2 = v.find(',', comma + 1);
        m.right            = std::atoi(v.substr(comma + 1, comma_2 - comma - 1).c_str());
        if (comma_2 != std::string::npos)
            m.sink_size = std::atoi(v.substr(comma_2 + 1).c_str());
        return m.sink_size >= 0;
    }

    std::string str() const
    {
        std::ostringstream os;
        switch (type)
        {
        case mask_enum::no_mask: os << "n"; break;
        case mask_enum::mask_top_left: os << "t(" << left << ":" << right << ")"; break;
        case mask_enum::mask_bottom_right: os << "b(" << left << ":" << right << ")"; break;
        case mask_enum::window_generic: os << "g(" << left << ":" << right << ")"; break;
        }
        return os.str();
    }
};

// CK's bias_info: n/0, e/1[:rank], a/2[:rank]; prints n, e[rank], alibi[rank].
struct BiasInfo
{
    bias_enum type = bias_enum::no_bias;
    int rank_info  = 0;

    static bool decode(const std::string& str, BiasInfo& b)
    {
        b            = BiasInfo{};
        const auto c = str.find(':');
        if (str == "0" || str == "n")
            return true;
        if (str[0] == '1' || str[0] == 'e')
            b.type = bias_enum::elementwise_bias;
        else if (str[0] == '2' || str[0] == 'a')
            b.type = bias_enum::alibi;
        else
            return false;
        if (c != std::string::npos)
            b.rank_info = std::atoi(str.substr(c + 1).c_str());
        return true;
    }

    std::string str() const
    {
        std::string s = type == bias_enum::no_bias ? "n" : type == bias_enum::elementwise_bias ? "e" : "alibi";
        if (type != bias_enum::no_bias && rank_info != 0)
            s += "[" + std::to_string(rank_info) + "]";
        return s;
    }
};

// Looks `str` up among the spellings of an enum flag.
template <typename E>
bool decode_name(const std::string& str, std::initializer_list<std::pair<const char*, E>> names, E& out)
{
    for (const auto& [name, value] : names)
        if (str == name)
        {
            out = value;
            return true;
        }
    return false;
}

} // namespace bench
