//! Incremental UTF-8 decoding of streamed token bytes. A token may end inside a character;
//! the incomplete tail waits for the next token. Written here because std's `from_utf8` error
//! (`valid_up_to`, `error_len`) already says all this needs: a crate would add nothing.

#[derive(Debug, Default, Clone)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes; returns the text now complete. Invalid bytes become U+FFFD.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut text = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(valid) => {
                    text.push_str(valid);
                    self.pending.clear();
                    return text;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    text.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        // An incomplete character at the end: keep it for the next push.
                        None => {
                            self.pending.drain(..valid);
                            return text;
                        }
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// The end of the stream: an incomplete character left over becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            char::REPLACEMENT_CHARACTER.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Stream;
    use proptest::prelude::*;

    #[test]
    fn a_character_split_across_tokens_comes_out_whole() {
        let mut stream = Utf8Stream::new();
        let bytes = "é🦀".as_bytes();
        assert_eq!(stream.push(&bytes[..1]), "");
        assert_eq!(stream.push(&bytes[1..3]), "é");
        assert_eq!(stream.push(&bytes[3..5]), "");
        assert_eq!(stream.push(&bytes[5..]), "🦀");
        assert_eq!(stream.finish(), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters_and_decoding_goes_on() {
        let mut stream = Utf8Stream::new();
        assert_eq!(stream.push(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(stream.push(b"\xe2\x82"), "");
        assert_eq!(stream.finish(), "\u{fffd}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_split_of_valid_text_decodes_to_the_same_text(text in "\\PC{0,40}", cuts in proptest::collection::vec(0usize..200, 0..8)) {
            let bytes = text.as_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut stream = Utf8Stream::new();
            let mut out = String::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                out.push_str(&stream.push(&bytes[start..cut]));
                start = cut;
            }
            out.push_str(&stream.finish());
            prop_assert_eq!(out, text);
        }

        #[test]
        fn arbitrary_bytes_split_anywhere_decode_as_std_lossy_decoding_does(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            cuts in proptest::collection::vec(0usize..200, 0..10),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut stream = Utf8Stream::new();
            let mut out = String::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                out.push_str(&stream.push(&bytes[start..cut]));
                start = cut;
            }
            out.push_str(&stream.finish());
            prop_assert_eq!(out, String::from_utf8_lossy(&bytes));
        }
    }
}
