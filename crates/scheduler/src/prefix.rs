//! Token lists with chained block hashes, so the common prefix of two 50K-token lists costs a
//! binary search over block hashes plus one block of token compares (O(log n + BLOCK)), and the
//! "held for sure" cut: anywhere on an engine that trims anywhere, else within the last
//! `rewindable_tokens` of what a sequence holds, or back to a checkpoint the engine reported.

use crate::ids::TokenId;
use crate::types::Checkpoint;

/// Tokens per hashed block.
pub(crate) const BLOCK: usize = 64;

/// An immutable token list with its prefix hashes and, for what a sequence holds, the
/// positions the engine keeps a checkpoint at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenSeq {
    tokens: Vec<TokenId>,
    /// `blocks[k]` hashes `tokens[..(k + 1) * BLOCK]` (chained), full blocks only.
    blocks: Vec<u64>,
    /// The checkpoints the engine keeps of it, ascending in place: it can be cut back to each
    /// exactly; none for a prompt.
    checkpoints: Vec<Checkpoint>,
}

fn mix(prev: u64, block: &[TokenId]) -> u64 {
    let mut h = prev ^ 0x9e37_79b9_7f4a_7c15;
    for &t in block {
        h = (h.rotate_left(5) ^ u64::from(t as u32)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h ^ (h >> 29)
}

impl TokenSeq {
    pub(crate) fn new(tokens: Vec<TokenId>) -> Self {
        let mut blocks = Vec::with_capacity(tokens.len() / BLOCK);
        let mut h = 0u64;
        for b in tokens.chunks_exact(BLOCK) {
            h = mix(h, b);
            blocks.push(h);
        }
        Self {
            tokens,
            blocks,
            checkpoints: Vec::new(),
        }
    }

    /// The same tokens with these checkpoints (those past its end dropped).
    pub(crate) fn with_checkpoints(mut self, mut checkpoints: Vec<Checkpoint>) -> Self {
        checkpoints.retain(|c| c.tokens > 0 && c.tokens <= self.len());
        checkpoints.sort_unstable_by_key(|c| c.tokens);
        checkpoints.dedup_by_key(|c| c.tokens);
        self.checkpoints = checkpoints;
        self
    }

    /// Its checkpoints up to `keep` (what a cut to `keep` leaves).
    pub(crate) fn checkpoints_to(&self, keep: u32) -> Vec<Checkpoint> {
        self.checkpoints
            .iter()
            .copied()
            .filter(|c| c.tokens <= keep)
            .collect()
    }

    /// How many checkpoints it holds, and their bytes.
    pub(crate) fn checkpoint_totals(&self) -> (u32, u64) {
        let bytes = self.checkpoints.iter().map(|c| c.bytes).sum();
        (self.checkpoints.len() as u32, bytes)
    }

    /// `base[..n]` followed by `extra`, reusing `base`'s block hashes for the shared part (a
    /// finished request's conversation: its prompt plus its output); no checkpoints.
    pub(crate) fn extend_prefix(base: &TokenSeq, n: usize, extra: &[TokenId]) -> Self {
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
        Self {
            tokens,
            blocks,
            checkpoints: Vec::new(),
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
        match self.checkpoints.partition_point(|c| c.tokens <= pos) {
            0 => 0,
            n => self.checkpoints[n - 1].tokens,
        }
    }

    /// What the engine holds for sure of this prompt from `source` (what a sequence holds),
    /// which shares `lcp` with it: all of it for an engine that trims anywhere; else as much
    /// when the cut it takes is within the last `rewindable_tokens` of the source (none: the
    /// prompt extends it whole), else up to the source's last checkpoint at or before it (0
    /// when none). Always leaves at least one token to read, so the last read yields logits.
    pub(crate) fn usable_prefix(
        &self,
        lcp: u32,
        source: &TokenSeq,
        trims_any: bool,
        rewindable_tokens: u32,
    ) -> u32 {
        let keep = lcp.min(self.len().saturating_sub(1));
        if trims_any || source.len() - keep <= rewindable_tokens {
            keep
        } else {
            source.checkpoint_at_or_before(keep)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extended_prefix_hashes_like_a_fresh_list() {
        let base: Vec<TokenId> = (0..1000).map(|i| (i * 7 % 13) as TokenId).collect();
        let b = TokenSeq::new(base.clone());
        for n in [0, 1, 63, 64, 65, 640, 999, 1000] {
            let extra: Vec<TokenId> = (0..150).map(|i| (i % 5) as TokenId).collect();
            let mut all = base[..n].to_vec();
            all.extend_from_slice(&extra);
            assert_eq!(TokenSeq::extend_prefix(&b, n, &extra), TokenSeq::new(all));
        }
    }

    #[test]
    fn held_for_sure_is_cut_where_the_source_can_be_cut() {
        let places = [400, 700, 1000].map(|p| Checkpoint::new(p, 1));
        let source = TokenSeq::new((0..1000).collect()).with_checkpoints(places.to_vec());
        let prompt = |n: i32| TokenSeq::new((0..n).chain([-1; 50]).collect());
        // an engine that trims anywhere keeps all it shares
        assert_eq!(prompt(900).usable_prefix(900, &source, true, 0), 900);
        // a prompt that extends the source whole keeps it whole
        assert_eq!(prompt(1000).usable_prefix(1000, &source, false, 0), 1000);
        // a departure 1 token back: within a window cache's one rewindable token
        assert_eq!(prompt(999).usable_prefix(999, &source, false, 1), 999);
        assert_eq!(prompt(999).usable_prefix(999, &source, false, 0), 700);
        // further back: the last checkpoint at or before it, or nothing
        assert_eq!(prompt(900).usable_prefix(900, &source, false, 1), 700);
        assert_eq!(prompt(300).usable_prefix(300, &source, false, 1), 0);
        // the same prompt again keeps all but its last token: a cut of one token, else the
        // checkpoint before
        let same = TokenSeq::new((0..1000).collect());
        assert_eq!(same.usable_prefix(1000, &source, false, 1), 999);
        assert_eq!(same.usable_prefix(1000, &source, false, 0), 700);
    }

    #[test]
    fn the_common_prefix_is_exact_at_every_length() {
        let a: Vec<TokenId> = (0..700).collect();
        let sa = TokenSeq::new(a.clone());
        for cut in [0usize, 1, 63, 64, 65, 128, 500, 699] {
            let mut b = a.clone();
            b[cut] = -1;
            assert_eq!(sa.common_prefix(&TokenSeq::new(b)), cut as u32);
        }
        assert_eq!(sa.common_prefix(&TokenSeq::new(a[..300].to_vec())), 300);
    }
}
