#pragma once
// String and stride helpers shared by the argument checks of the MHA entry points (checks.h) and of paged attention
// (csrc/paged/paged_attention.cu, compiled by nvcc: no templates over structured bindings here).

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>

namespace mha {

inline std::string str(long long v) { return std::to_string(v); }

inline bool aligned(const void* p, int bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

// Whether two elements of a strided tensor ({extent, stride} per dimension, strides >= 0) may share an address:
// the dimensions of extent > 1, by increasing stride, must each step past everything the ones before span. Every
// dense layout passes, in any dimension order; a zero stride over an extent > 1 fails; an empty tensor (an extent 0)
// has nothing to overlap; an extent past 2^63 elements (strides that large) counts as overlapping, since no offset of
// it is representable. No allocation (per call).
inline bool strides_overlap(std::array<std::pair<int64_t, int64_t>, 5> dims)
{
    for (const auto& d : dims)
        if (d.first <= 0)
            return false;
    std::sort(dims.begin(), dims.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    int64_t span = 1; // one past the largest offset of the dimensions so far
    for (const auto& [n, stride] : dims)
    {
        if (n <= 1)
            continue;
        if (stride < span)
            return true;
        int64_t step = 0;
        if (__builtin_mul_overflow(stride, n - 1, &step) || __builtin_add_overflow(span, step, &span))
            return true;
    }
    return false;
}

// An output [splits, batch, rows, heads, cols] with unit column stride (splits: the split-KV partials' outer
// dimension, {extent, stride}; 1 elsewhere): "" when its strides give every element its own address, else the
// reason. Group mode: rows are physical and their count device data (max_seqlen_q may over-estimate it), so only
// heads against columns (and splits) are checked, and the batch stride is unused; with no rows at all (max_seqlen
// 0: every sequence empty) nothing is written.
inline std::string overlapping_output(const char* t, int64_t batch, int64_t rows, int64_t heads, int64_t cols,
                                      int64_t row_stride, int64_t head_stride, int64_t batch_stride, bool group,
                                      std::pair<int64_t, int64_t> splits = {1, 0})
{
    using Dim = std::pair<int64_t, int64_t>;
    if (group)
        rows = std::min<int64_t>(rows, 1);
    if (!strides_overlap(std::array<Dim, 5>{Dim{cols, 1}, Dim{rows, row_stride}, Dim{heads, head_stride},
                                            Dim{group ? 1 : batch, batch_stride}, splits}))
        return "";
    return std::string(t) + " strides overlap: " + str(rows) + " rows x " + str(heads) + " heads x " + str(cols) +
           " columns" + (group ? "" : " x " + str(batch) + " batches") +
           (splits.first > 1 ? " x " + str(splits.first) + " splits" : "") + " at row / head / batch" +
           (splits.first > 1 ? " / split" : "") + " strides " + str(row_stride) + " / " + str(head_stride) + " / " +
           str(batch_stride) + (splits.first > 1 ? " / " + str(splits.second) : "") +
           " would write some elements twice (a race) or past 2^63 elements";
}

} // namespace mha
