//! Stop strings over streamed text. Text that could still be the start of a stop string is
//! held back until it is known not to be; on a match, the text before it is released and the
//! rest dropped. Written here because it must work on the incremental, already-decoded text
//! stream and keep its state across pauses; it is a few lines over `str` search.

#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
    /// The stop string that matched.
    matched: Option<String>,
}

/// What one push released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub text: String,
    /// A stop string matched: nothing more comes out.
    pub stopped: bool,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
            matched: None,
        }
    }

    /// The stop string that ended the text, once one did.
    pub fn matched(&self) -> Option<&str> {
        self.matched.as_deref()
    }

    pub fn push(&mut self, text: &str) -> Released {
        if self.stopped {
            return Released {
                text: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(text);
        if let Some((at, stop)) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min()
        {
            self.stopped = true;
            self.matched = Some(stop.clone());
            let text = self.held[..at].to_owned();
            self.held.clear();
            return Released {
                text,
                stopped: true,
            };
        }
        // Keep the longest tail that is a proper prefix of some stop string.
        let keep = self
            .stops
            .iter()
            .map(|stop| longest_suffix_prefix(&self.held, stop))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let text = self.held[..cut].to_owned();
        self.held.drain(..cut);
        Released {
            text,
            stopped: false,
        }
    }

    /// The end of the stream: what was held back is text after all.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`, on char bounds.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    let max = text.len().min(stop.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && stop.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_string_split_across_pushes_is_found_and_nothing_after_it_comes_out() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("hello E").text, "hello ");
        let r = m.push("NDing");
        assert_eq!(
            r,
            Released {
                text: String::new(),
                stopped: true
            }
        );
        assert!(m.push("more").stopped);
    }

    #[test]
    fn text_that_only_looked_like_a_stop_is_released() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("an E").text, "an ");
        assert_eq!(m.push("x").text, "Ex");
        assert_eq!(m.push("EN").text, "");
        assert_eq!(m.finish(), "EN");
    }

    #[test]
    fn without_stops_everything_passes_at_once() {
        let mut m = StopMatcher::new(vec![String::new()]);
        assert_eq!(m.push("abc").text, "abc");
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let mut m = StopMatcher::new(vec!["b".into(), "a".into()]);
        assert_eq!(m.push("xxab").text, "xx");
    }
}
