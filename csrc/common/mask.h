#pragma once
// Mask policy shared by the kernels: which key columns a block of query rows may see, and whether a whole
// (row block, column block) tile is visible so the mainloop can skip elementwise masking there.
// Semantics are MaskParams' (fwd_params.h). csrc/reference implements the same rule independently.

#include "fwd_params.h"

namespace mha {

struct MaskRange
{
    int n_begin; // first visible key column of the window (sink columns aside)
    int n_end;   // one past the last visible key column; empty when n_end <= n_begin
};

struct WindowMask
{
    int left, right; // < 0: unbounded
    int diag_offset; // 0 (top-left) or seqlen_k - seqlen_q (bottom-right)
    int seqlen_k;
    int sink_size;   // key columns [0, sink_size) stay visible up to the diagonal + right

    MHA_HOST_DEVICE static WindowMask make(const MaskParams& m, int seqlen_q, int seqlen_k)
    {
        return WindowMask{m.left, m.right, m.bottom_right ? seqlen_k - seqlen_q : 0, seqlen_k, m.sink_size};
    }

    MHA_HOST_DEVICE bool visible(int row, int col) const
    {
        const int diag = row + diag_offset;
        const bool right_ok = right < 0 || col <= diag + right;
        return col < seqlen_k && right_ok && (left < 0 || col >= diag - left || (col < sink_size && row < seqlen_k));
    }

    // Visible columns of one row as [lo, hi) plus the sink prefix [0, sink_hi): one bound test per element.
    MHA_HOST_DEVICE void row_bounds(int row, int& lo, int& hi, int& sink_hi) const
    {
        const int diag = row + diag_offset;
        lo = left < 0 ? 0 : diag - left;
        hi = right < 0 ? seqlen_k : min_i(diag + right + 1, seqlen_k);
        sink_hi = (left >= 0 && row < seqlen_k) ? min_i(sink_size, hi) : 0;
    }

    MHA_HOST_DEVICE static int min_i(int a, int b) { return a < b ? a : b; }

    // Window columns that rows [m_begin, m_end) may see, clipped to [0, seqlen_k).
    MHA_HOST_DEVICE MaskRange range(int m_begin, int m_end) const
    {
        int lo = 0, hi = seqlen_k;
        if (left >= 0)
        {
            const int v = m_begin + diag_offset - left;
            lo = v > 0 ? v : 0;
        }
        if (right >= 0)
        {
            const int v = m_end - 1 + diag_offset + right + 1;
            hi = v < hi ? v : hi;
        }
        return MaskRange{lo, hi};
    }

    // One past the last sink column any row of [m_begin, m_end) sees (0 without sinks).
    MHA_HOST_DEVICE int sink_end(int m_end) const
    {
        if (sink_size <= 0 || left < 0)
            return 0; // without a left bound the window already covers the sinks
        int hi = sink_size < seqlen_k ? sink_size : seqlen_k;
        if (right >= 0)
        {
            const int v = m_end - 1 + diag_offset + right + 1;
            hi = v < hi ? v : hi;
        }
        return hi > 0 ? hi : 0;
    }

    // True when every (row, col) in [m_begin, m_end) x [n_begin, n_end) is visible: no elementwise masking needed.
    MHA_HOST_DEVICE bool tile_fully_visible(int m_begin, int m_end, int n_begin, int n_end) const
    {
        if (n_end > seqlen_k)
            return false;
        if (right >= 0 && n_end - 1 > m_begin + diag_offset + right)
            return false;
        // left of the window only sink columns, and only rows below seqlen_k see those (visible())
        if (left >= 0 && n_begin < m_end - 1 + diag_offset - left && (n_end > sink_size || m_end > seqlen_k))
            return false;
        return true;
    }
};

} // namespace mha
