#pragma once
// Command line of the benchmark executables: ArgParser behaves like CK's ck_tile::ArgParser (which AITER's benchmarks
// use): flags are `-key=value` only, keys are declared with insert(key, default, help) and printed by `-?` in
// insertion order. Below it, the value grammars both MHA benchmarks share, as CK decodes them: -mask (MaskInfo),
// -bias (BiasInfo) and enum-like flags (decode_name). Header-only; needs only ck_tile_compat.h for the enums.

#include "ck_tile_compat.h"

#include <climits>
#include <cmath>
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

    // The readers below are strict: a value outside its flag's grammar reads as 0 / false / empty and its reason is
    // kept (the first one) in error(), which read_fwd_config / read_bwd_config report before using any value
    // (kExitBadArgs). CK reads with atoi, so "-s=abc" ran as s=0 and "-v=yes" as -v=0 there.
    const std::string& error() const { return error_; }

    // A whole integer in int32 range; one trailing comma is allowed ("-d=16," as AITER's smoke matrix writes it).
    int get_int(const std::string& key) const
    {
        const std::string raw = get_str(key);
        const std::string v   = !raw.empty() && raw.back() == ',' ? raw.substr(0, raw.size() - 1) : raw;
        int64_t value         = 0;
        if (!parse_int64(v, value) || value < INT32_MIN || value > INT32_MAX)
        {
            note(key, raw, "an integer in [-2147483648, 2147483647]");
            return 0;
        }
        return static_cast<int>(value);
    }

    uint32_t get_uint32(const std::string& key) const
    {
        return static_cast<uint32_t>(checked(key, get_str(key), 0, UINT32_MAX));
    }

    uint64_t get_uint64(const std::string& key) const
    {
        const std::string v = get_str(key);
        uint64_t value      = 0;
        if (!parse_uint64(v, value))
            note(key, v, "a whole number in [0, 2^64)");
        return value;
    }

    // "t"/"true" and "f"/"false", otherwise an integer (non-zero is true).
    bool get_bool(const std::string& key) const
    {
        const std::string v = get_str(key);
        if (v == "t" || v == "true")
            return true;
        if (v == "f" || v == "false")
            return false;
        int64_t value = 0;
        if (!parse_int64(v, value))
            note(key, v, "t, true, f, false or an integer");
        return value != 0;
    }

    // A finite number, wholly consumed ("0.2", "1e-3"); nan, inf and trailing text are refused.
    float get_float(const std::string& key) const
    {
        const std::string v = get_str(key);
        char* end           = nullptr;
        const float value   = v.empty() ? 0.f : std::strtof(v.c_str(), &end);
        // ERANGE on underflow ("1e-50") leaves a zero or denormal, which is taken; an overflow is inf
        if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(value))
        {
            note(key, v, "a finite number in float range");
            return 0.f;
        }
        return value;
    }

    // Comma-separated integers: "-s=128,64,1" -> {128, 64, 1}. Every item must be an int32; one trailing comma is
    // allowed ("-s=128,"), an empty item anywhere else ("-s=,3", "-s=1,,2", "-s=,") is refused.
    std::vector<int32_t> get_int_vec(const std::string& key) const
    {
        std::vector<int32_t> out;
        std::vector<std::string> items = split(get_str(key), ',');
        if (items.size() > 1 && items.back().empty())
            items.pop_back();
        for (const auto& item : items)
        {
            int64_t value = 0;
            if (!parse_int64(item, value) || value < INT32_MIN || value > INT32_MAX)
            {
                note(key, get_str(key), "a comma-separated list of integers in int32 range");
                return {};
            }
            out.push_back(static_cast<int32_t>(value));
        }
        return out;
    }

    // An optional sign and decimal digits, nothing else, in int64 range.
    static bool parse_int64(const std::string& s, int64_t& value)
    {
        const bool negative = !s.empty() && s[0] == '-';
        const size_t digits = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
        uint64_t magnitude  = 0;
        if (!parse_uint64(s.substr(digits), magnitude))
            return false;
        if (magnitude > (negative ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX)))
            return false;
        value = negative ? int64_t(0 - magnitude) : int64_t(magnitude);
        return true;
    }

    // Decimal digits only, in uint64 range.
    static bool parse_uint64(const std::string& s, uint64_t& value)
    {
        if (s.empty() || s.size() > 20)
            return false;
        uint64_t v = 0;
        for (char ch : s)
        {
            if (ch < '0' || ch > '9')
                return false;
            const uint64_t d = uint64_t(ch - '0');
            if (v > (UINT64_MAX - d) / 10)
                return false;
            v = v * 10 + d;
        }
        value = v;
        return true;
    }

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

private:
    struct Arg
    {
        std::string value;
        std::string help;
    };

    static constexpr std::string::size_type kMinKeyWidth = 11; // CK pads keys to at least this width

    // The value of `key` as an integer in [lo, hi], else 0 with the reason noted.
    int64_t checked(const std::string& key, const std::string& v, int64_t lo, int64_t hi) const
    {
        int64_t value = 0;
        if (!parse_int64(v, value) || value < lo || value > hi)
        {
            note(key, v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
            return 0;
        }
        return value;
    }

    void note(const std::string& key, const std::string& value, const std::string& expected) const
    {
        if (error_.empty())
            error_ = "-" + key + "=" + value + ": expected " + expected;
    }

    std::map<std::string, Arg> args_;
    std::vector<std::string> keys_; // insertion order, for the help
    mutable std::string error_;     // the first malformed value a reader met
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
        std::vector<int> n; // the numbers after ':', each a whole int32 ("t:5," and "t:abc,1" are refused)
        for (const std::string& item : ArgParser::split(str.substr(c + 1), ','))
        {
            int64_t value = 0;
            if (!ArgParser::parse_int64(item, value) || value < INT32_MIN || value > INT32_MAX)
                return false;
            n.push_back(static_cast<int>(value));
        }
        if (t == "xt" || t == "xb") // xformers window w: w < 0 causal, else w/2 keys left and w-1-w/2 right
        {
            if (n.size() != 1)
                return false;
            m.type  = t == "xt" ? mask_enum::mask_top_left : mask_enum::mask_bottom_right;
            m.left  = -1;
            m.right = 0;
            if (n[0] > 0)
            {
                m.left  = n[0] / 2;
                m.right = n[0] - 1 - m.left;
            }
            return true;
        }
        if ((t != "t" && t != "b" && t != "g") || n.size() < 2 || n.size() > 3)
            return false;
        m.type      = t == "t" ? mask_enum::mask_top_left
                      : t == "b" ? mask_enum::mask_bottom_right
                                 : mask_enum::window_generic;
        m.left      = n[0];
        m.right     = n[1];
        m.sink_size = n.size() == 3 ? n[2] : 0;
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

    // CK's bias_info::decode: whole words only ("apple" is not alibi), and a rank only after e / a (in [0, 2] for
    // elementwise, [0, 1] for alibi, checked by the caller). 1 / 2 also take a rank here.
    static bool decode(const std::string& str, BiasInfo& b)
    {
        b                   = BiasInfo{};
        const auto c        = str.find(':');
        const std::string t = str.substr(0, c);
        if (c == std::string::npos && (t == "0" || t == "n"))
            return true;
        if (t == "1" || t == "e" || t == "elementwise")
            b.type = bias_enum::elementwise_bias;
        else if (t == "2" || t == "a" || t == "alibi")
            b.type = bias_enum::alibi;
        else
            return false;
        if (c == std::string::npos)
            return true;
        int64_t rank = 0;
        if (!ArgParser::parse_int64(str.substr(c + 1), rank) || rank < 0 || rank > 2)
            return false;
        b.rank_info = static_cast<int>(rank);
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
