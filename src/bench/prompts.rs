//! Seeded, deterministic prompt text: the same seed and length give the same words on every
//! run and every machine, so two servers (or two settings) read the same prompts.

/// Plain English words, so any tokenizer turns each into about one or two tokens.
const WORDS: &[&str] = &[
    "river", "stone", "market", "lantern", "garden", "engine", "harbor", "window", "forest",
    "letter", "silver", "morning", "bridge", "pocket", "candle", "winter", "valley", "mirror",
    "thunder", "orchard", "compass", "meadow", "signal", "basket", "island", "feather", "ladder",
    "cotton", "planet", "whistle", "kettle", "anchor", "blanket", "copper", "desert", "fabric",
    "glacier", "hammer", "jungle", "marble", "needle", "ocean", "pepper", "quarry", "ribbon",
    "saddle", "timber", "violin", "walnut", "yellow", "zephyr", "cabin", "dragon", "falcon",
];

/// splitmix64: a tiny, well-known generator; written here because the prompts only need
/// reproducible word choices, not statistical quality, and it keeps the sequence identical
/// across crate versions (a dependency's generator may change its stream between releases).
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// About `tokens` tokens of text (one word is about one token for common tokenizers; the
/// server's `usage.prompt_tokens` reports the exact count).
pub fn text(seed: u64, tokens: u32) -> String {
    let mut rng = Prng::new(seed);
    let mut out = String::with_capacity(tokens as usize * 7);
    for i in 0..tokens {
        if i > 0 {
            out.push(if i % 12 == 0 { '.' } else { ' ' });
            if i % 12 == 0 {
                out.push(' ');
            }
        }
        out.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_text_and_another_seed_other_text() {
        assert_eq!(text(7, 50), text(7, 50));
        assert_ne!(text(7, 50), text(8, 50));
        assert_eq!(text(7, 50).split_whitespace().count(), 50);
    }

    #[test]
    fn the_generator_stream_is_fixed() {
        // splitmix64's published first output for seed 0.
        assert_eq!(Prng::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }
}
