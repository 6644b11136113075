// Runs the host reference (csrc/reference/host_reference.h) on one problem read from the current directory: cfg.txt
// (sizes, strides, feature switches, in the order read below) and raw little-endian arrays (*.bin). Writes o.bin and
// lse.bin. tests/test_reference_cpu.py drives it against an independent NumPy golden model.
#include "reference/host_reference.h"

#include <fstream>
#include <string>
#include <vector>

template <typename T>
static std::vector<T> read_array(const std::string& name)
{
    std::ifstream in(name + ".bin", std::ios::binary | std::ios::ate);
    const size_t bytes = static_cast<size_t>(in.tellg());
    in.seekg(0);
    std::vector<T> v(bytes / sizeof(T) + 1); // +1: never empty, so .data() is a valid pointer
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(bytes));
    return v;
}

int main()
{
    std::ifstream c("cfg.txt");
    reference::AttentionProblem p{};
    int group = 0, has_sink = 0, has_drop = 0, keep_threshold = 0;
    auto strides = [&](reference::Strides& s) { c >> s.batch >> s.head >> s.row; };
    c >> p.batch >> p.nhead_q >> p.nhead_k >> p.hdim_q >> p.hdim_v >> p.max_seqlen_q >> group;
    strides(p.q_strides), strides(p.k_strides), strides(p.v_strides);
    c >> p.scale >> p.softcap >> p.mask.type >> p.mask.left >> p.mask.right >> p.mask.sink_size >> p.bias_type;
    strides(p.bias_strides);
    c >> p.alibi_batch_stride >> has_sink >> has_drop;
    strides(p.randval_strides);
    c >> keep_threshold >> p.rp_keep;
    p.keep_threshold = static_cast<uint8_t>(keep_threshold);

    auto seqlen_q = read_array<int32_t>("seqlen_q"), seqlen_k = read_array<int32_t>("seqlen_k");
    auto seqstart_q = read_array<int32_t>("seqstart_q"), seqstart_k = read_array<int32_t>("seqstart_k");
    auto out_start = read_array<int32_t>("out_start");
    auto q = read_array<float>("q"), k = read_array<float>("k"), v = read_array<float>("v");
    auto bias = read_array<float>("bias"), sink = read_array<float>("sink"), alibi = read_array<float>("alibi");
    auto randval = read_array<uint8_t>("randval");
    p.seqlen_q = seqlen_q.data(), p.seqlen_k = seqlen_k.data(), p.out_start = out_start.data();
    p.seqstart_q = group ? seqstart_q.data() : nullptr;
    p.seqstart_k = group ? seqstart_k.data() : nullptr;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.bias = bias.data(), p.alibi_slopes = alibi.data();
    p.sink = has_sink ? sink.data() : nullptr;
    p.randval = has_drop ? randval.data() : nullptr;

    const size_t rows = size_t(p.nhead_q) * out_start[p.batch];
    std::vector<float> o(rows * p.hdim_v + 1), lse(rows + 1);
    p.o = o.data(), p.lse = lse.data();
    reference::reference_attention_fwd(p);
    std::ofstream("o.bin", std::ios::binary).write(reinterpret_cast<char*>(o.data()), std::streamsize(rows * p.hdim_v * 4));
    std::ofstream("lse.bin", std::ios::binary).write(reinterpret_cast<char*>(lse.data()), std::streamsize(rows * 4));
    return 0;
}
