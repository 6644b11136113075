#pragma once
// Mask policy shared by the kernels: which key columns a block of query rows may see, and whether a whole
// (row block, column block) tile is visible so the mainloop can skip elementwise masking there.
// Semantics are MaskParams' (fwd_params.h). csrc/reference implements the same rule independently.

#include "fwd_params.h"

namespace mha {

struct MaskRange
{
    int n_begin; // first visible key column of any row in the block
    int n_end;   // one past the last visible key column
};

struct WindowMask
{
    int left, right; // < 0: unbounded
    int diag_offset; // 0 (top-left) or seqlen_k - seqlen_q (bottom-right)
    int seqlen_k;

    MHA_HOST_DEVICE static WindowMask make(const MaskParams& m, int seqlen_q, int seqlen_k)
    {
        return WindowMask{m.left, m.right, m.bottom_right ? seqlen_k - seqlen_q : 0, seqlen_k};
    }

    MHA_HOST_DEVICE bool visible(int row, int col) const
    {
        const int diag = row + diag_offset;
        return col < seqlen_k && (left < 0 || col >= diag - left) && (right < 0 || col <= diag + right);
    }

    // Key columns that rows [m_begin, m_end) may see, clipped to [0, seqlen_k). Empty when n_end <= n_begin.
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

    // True when every (row, col) in [m_begin, m_end) x [n_begin, n_end) is visible: no elementwise masking needed.
    MHA_HOST_DEVICE bool tile_fully_visible(int m_begin, int m_end, int n_begin, int n_end) const
    {
        if (n_end > seqlen_k)
            return false;
        if (right >= 0 && n_end - 1 > m_begin + diag_offset + right)
            return false;
        if (left >= 0 && n_begin < m_end - 1 + diag_offset - left)
            return false;
        return true;
    }
};

} // namespace mha
