//! Token lists with chained block hashes, so the common prefix of two 50K-token lists costs a
//! binary search over block hashes plus one block of token compares (O(log n + BLOCK)), and the
//! "held for sure" cut for engines that trim only at turn-token checkpoints.

use crate::ids::TokenId;

/// Tokens per hashed block.
pub(crate) const BLOCK: usize = 64;

/// An immutable token list with its prefix hashes and checkpoint positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenSeq {
    tokens: Vec<TokenId>,
    /// `blocks[k]` hashes `tokens[..(k + 1) * BLOCK]` (chained), full blocks only.
    blocks: Vec<u64>,
    /// Positions `p` where `tokens[p]` is the turn token (a checkpoint ends just before it).
    turns: Vec<u32>,
}

fn mix(prev: u64, block: &[TokenId]) -> u64 {
    let mut h = prev ^ 0x9e37_79b9_7f4a_7c15;
    for &t in block {
        h = (h.rotate_left(5) ^ u64::from(t as u32)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^ (h >> 29)
}

impl TokenSeq {
    pub(crate) fn new(tokens: Vec<TokenId>, turn: Option<TokenId>) -> Self {
        let mut blocks = Vec::with_capacity(tokens.len() / BLOCK);
        let mut h = 0u64;
        for b in tokens.chunks_exact(BLOCK) {
            h = mix(h, b);
            blocks.push(h);
        }
        let turns = match turn {
            Some(t) => tokens
                .iter()
                .enumerate()
                .filter(|(_, x)| **x == t)
                .map(|(i, _)| i as u32)
                .collect(),
            None => Vec::new(),
        };
        Self {
            tokens,
            blocks,
            turns,
        }
    }

    /// `base[..n]` followed by `extra`, reusing `base`'s block hashes and checkpoints for the
    /// shared part (a finished request's conversation: its prompt plus its output).
    pub(crate) fn extend_prefix(
        base: &TokenSeq,
        n: usize,
        extra: &[TokenId],
        turn: Option<TokenId>,
    ) -> Self {
        let n = n.min(base.tokens.len());
        let mut tokens = Vec::with_capacity(n + extra.len());
        tokens.extend_from_slice(&base.tokens[..n]);
        tokens.extend_from_slice(extra);
        let kept_blocks = n / BLOCK;
        let mut blocks = Vec::with_capacity(tokens.len() / BLOCK);
        blocks.extend_from_slice(&base.blocks[..kept_blocks]);
        let mut h = blocks.last().copied().unwrap_or(0);
        for b in tokens[kept_blocks * BLOCK..].chunks_exact(BLOCK) {
            h = mix(h, b);
            blocks.push(h);
        }
        let mut turns: Vec<u32> = base
            .turns
            .iter()
            .copied()
            .take_while(|&p| (p as usize) < n)
            .collect();
        if let Some(t) = turn {
            turns.extend(
                extra
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| **x == t)
                    .map(|(i, _)| (n + i) as u32),
            );
        }
        Self {
            tokens,
            blocks,
            turns,
        }
    }

    pub(crate) fn len(&self) -> u32 {
        self.tokens.len() as u32
    }

    /// Length of the longest common prefix.
    pub(crate) fn common_prefix(&self, other: &TokenSeq) -> u32 {
        let nb = self.blocks.len().min(other.blocks.len());
        let (mut lo, mut hi) = (0usize, nb);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.blocks[mid - 1] == other.blocks[mid - 1] {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let end = self.tokens.len().min(other.tokens.len());
        let mut i = lo * BLOCK;
        while i < end && self.tokens[i] == other.tokens[i] {
            i += 1;
        }
        i as u32
    }

    /// The last checkpoint at or before `pos` (0 when none).
    fn checkpoint_at_or_before(&self, pos: u32) -> u32 {
        match self.turns.partition_point(|&p| p <= pos) {
            0 => 0,
            n => self.turns[n - 1],
        }
    }

    /// What the engine holds for sure of this prompt from a source of `source_len` tokens that
    /// shares `lcp` with it: all of it for an engine that trims anywhere; else the whole source
    /// when the prompt extends it, else up to the last checkpoint for an engine that keeps them
    /// (none for one that keeps none). Always leaves at least one token to read, so the last
    /// read yields logits.
    pub(crate) fn usable_prefix(
        &self,
        lcp: u32,
        source_len: u32,
        trims_any: bool,
        checkpoints: bool,
    ) -> u32 {
        let max_keep = self.len().saturating_sub(1);
        if trims_any {
            lcp.min(max_keep)
        } else if lcp == source_len && lcp <= max_keep {
            lcp
        } else if checkpoints {
            self.checkpoint_at_or_before(lcp.min(max_keep))
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extended_prefix_hashes_like_a_fresh_list() {
        let base: Vec<TokenId> = (0..1000).map(|i| (i * 7 % 13) as TokenId).collect();
        let b = TokenSeq::new(base.clone(), Some(3));
        for n in [0, 1, 63, 64, 65, 640, 999, 1000] {
            let extra: Vec<TokenId> = (0..150).map(|i| (i % 5) as TokenId).collect();
            let mut all = base[..n].to_vec();
            all.extend_from_slice(&extra);
            assert_eq!(
                TokenSeq::extend_prefix(&b, n, &extra, Some(3)),
                TokenSeq::new(all, Some(3))
            );
        }
    }

    #[test]
    fn the_common_prefix_is_exact_at_every_length() {
        let a: Vec<TokenId> = (0..700).collect();
        let sa = TokenSeq::new(a.clone(), None);
        for cut in [0usize, 1, 63, 64, 65, 128, 500, 699] {
            let mut b = a.clone();
            b[cut] = -1;
            assert_eq!(sa.common_prefix(&TokenSeq::new(b, None)), cut as u32);
        }
        assert_eq!(
            sa.common_prefix(&TokenSeq::new(a[..300].to_vec(), None)),
            300
        );
    }
}
