//! What a JSON schema's string `pattern` costs at every token, read the way llama.cpp's
//! converter reads it (`_pattern_to_rule` in `json-schema-to-grammar.cpp`).
//!
//! The converter turns `X{m,n}` into n nested copies of X's rule, and llama.cpp's grammar
//! keeps one parse stack per way the text so far can be matched. A repetition of a body that
//! always has the same length (`[a-z]{1,64}`) has one copy live at a time: the text's length
//! says which. A body of varying length (`(a|aa){0,30}`) leaves up to n copies live, and
//! nesting multiplies: `((a{1,2}){1,12}){1,12}` keeps up to 2·12·12 stacks. Every candidate
//! token of every step is checked against every stack, and each check walks the others' empty
//! paths, so the work grows much faster than the stacks (measured on the test model: a full
//! vocabulary's mask took 40 ms at 36 live positions, 0.35 s at 64 and 11 s at 144). A
//! repetition of what can match empty (`(a?){0,12}`) matches one text in many ways, nested
//! (`((a?){0,12}){0,12}`) in exponentially many: it is refused outright, as it always has a
//! form without it (`a{0,12}`, `a{0,144}`).
//!
//! Hand-written rather than `regex-syntax`: the estimate must read a pattern exactly as
//! llama.cpp does (only `^...$` anchored patterns are converted, `(?` groups make it accept any
//! string, literals run together), which a general regex parser does not.

/// A pattern's live parse positions at most; past it the pattern is refused.
pub const PATTERN_LIVE_MAX: u64 = 1000;

/// What a pattern costs, or why it cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternCost {
    /// llama.cpp does not convert it (not anchored `^...$`, a lookaround, a syntax it does not
    /// take): the string is then any string, or the converter refuses it with its own error.
    NotConverted,
    /// The most parse stacks it can keep live at once (1 for a plain literal).
    Live(u64),
    /// A repetition (more than once) of a part that can match empty: that part, as written.
    EmptyRepeated(String),
}

/// The cost of `pattern` (a JSON schema's `pattern` value).
pub fn pattern_cost(pattern: &str) -> PatternCost {
    let bytes = pattern.as_bytes();
    if bytes.len() < 2 || bytes[0] != b'^' || bytes[bytes.len() - 1] != b'$' {
        return PatternCost::NotConverted;
    }
    let mut parser = Parser {
        text: &bytes[1..bytes.len() - 1],
        at: 0,
        depth: 0,
    };
    match parser.alternatives() {
        Ok(shape) if parser.at == parser.text.len() => PatternCost::Live(shape.live),
        Ok(_) => PatternCost::NotConverted,
        Err(Stop::EmptyRepeated(part)) => PatternCost::EmptyRepeated(part),
        Err(Stop::NotConverted) => PatternCost::NotConverted,
    }
}

/// What the cost needs to know of a part of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    /// Shortest match, in characters.
    min_len: u64,
    /// Longest match; `None`: unbounded.
    max_len: Option<u64>,
    /// Parse stacks it can keep live at once.
    live: u64,
}

impl Shape {
    const ATOM: Shape = Shape {
        min_len: 1,
        max_len: Some(1),
        live: 1,
    };
    const EMPTY: Shape = Shape {
        min_len: 0,
        max_len: Some(0),
        live: 0,
    };

    fn fixed_len(&self) -> bool {
        self.max_len == Some(self.min_len)
    }

    /// How many lengths its matches can have: after it, the next part can have started at
    /// as many places, each with its own stacks. (An unbounded part counts 2: the rule of a
    /// `*` calls itself last, so its iterations share their stacks.)
    fn spread(&self) -> u64 {
        self.max_len
            .map_or(2, |max| max.saturating_sub(self.min_len).saturating_add(1))
    }

    fn then(self, next: Shape) -> Shape {
        Shape {
            min_len: self.min_len.saturating_add(next.min_len),
            max_len: self
                .max_len
                .zip(next.max_len)
                .map(|(a, b)| a.saturating_add(b)),
            live: self
                .live
                .saturating_add(self.spread().saturating_mul(next.live)),
        }
    }

    fn or(self, other: Shape) -> Shape {
        Shape {
            min_len: self.min_len.min(other.min_len),
            max_len: self.max_len.zip(other.max_len).map(|(a, b)| a.max(b)),
            live: self.live.saturating_add(other.live),
        }
    }

    /// `self{min,max}` (`max` `None`: unbounded). A body of one length keeps one copy live;
    /// another keeps up to as many as the copies llama.cpp writes out (`max`, or `min` and the
    /// recursive rest).
    fn repeated(self, min: u64, max: Option<u64>) -> Shape {
        let copies = max.unwrap_or_else(|| min.saturating_add(1)).max(1);
        let live = if self.fixed_len() {
            self.live
        } else {
            self.live.saturating_mul(copies)
        };
        Shape {
            min_len: self.min_len.saturating_mul(min),
            max_len: max.zip(self.max_len).map(|(n, len)| n.saturating_mul(len)),
            live: live.saturating_add(1),
        }
    }
}

enum Stop {
    NotConverted,
    EmptyRepeated(String),
}

/// llama.cpp's `MAX_PATTERN_DEPTH`: deeper groups are not converted.
const DEPTH_MAX: u32 = 100;

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
    depth: u32,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    /// Branches separated by `|`, up to a `)` or the end.
    fn alternatives(&mut self) -> Result<Shape, Stop> {
        let mut whole = self.sequence()?;
        while self.peek() == Some(b'|') {
            self.at += 1;
            whole = whole.or(self.sequence()?);
        }
        Ok(whole)
    }

    fn sequence(&mut self) -> Result<Shape, Stop> {
        let mut whole = Shape::EMPTY;
        while let Some(c) = self.peek() {
            if c == b'|' || c == b')' {
                break;
            }
            let start = self.at;
            let atom = self.atom()?;
            let part = self.quantifier(start, atom)?.unwrap_or(atom);
            whole = if whole.fixed_len() && part.fixed_len() {
                // after parts of one length, the text's length says which part is being
                // read: a literal, `\d{3}-\d{4}`, ... keep one stack
                Shape {
                    live: whole.live.max(part.live),
                    ..whole.then(part)
                }
            } else {
                whole.then(part)
            };
        }
        Ok(whole)
    }

    fn atom(&mut self) -> Result<Shape, Stop> {
        let c = self.peek().ok_or(Stop::NotConverted)?;
        self.at += 1;
        match c {
            b'(' => {
                if self.peek() == Some(b'?') {
                    if self.text.get(self.at + 1) == Some(&b':') {
                        self.at += 2;
                    } else {
                        return Err(Stop::NotConverted);
                    }
                }
                self.depth += 1;
                if self.depth > DEPTH_MAX {
                    return Err(Stop::NotConverted);
                }
                let inner = self.alternatives()?;
                if self.peek() != Some(b')') {
                    return Err(Stop::NotConverted);
                }
                self.at += 1;
                self.depth -= 1;
                Ok(inner)
            }
            b'[' => {
                while let Some(c) = self.peek() {
                    match c {
                        b']' => break,
                        b'\\' => self.at += escape_len(&self.text[self.at..])?,
                        _ => self.at += 1,
                    }
                }
                if self.peek() != Some(b']') {
                    return Err(Stop::NotConverted);
                }
                self.at += 1;
                Ok(Shape::ATOM)
            }
            b'\\' => {
                let escaped = self.peek().ok_or(Stop::NotConverted)?;
                if b"^$.[]()|{}*+?".contains(&escaped) {
                    self.at += 1;
                } else {
                    self.at += escape_len(&self.text[self.at - 1..])? - 1;
                }
                Ok(Shape::ATOM)
            }
            b'*' | b'+' | b'?' | b'{' | b'}' | b']' | b'^' | b'$' => Err(Stop::NotConverted),
            _ => Ok(Shape::ATOM),
        }
    }

    /// The quantifier after the atom that started at `start`, applied to it.
    fn quantifier(&mut self, start: usize, atom: Shape) -> Result<Option<Shape>, Stop> {
        let (min, max) = match self.peek() {
            Some(b'*') => (0, None),
            Some(b'+') => (1, None),
            Some(b'?') => (0, Some(1)),
            Some(b'{') => {
                let close = self.text[self.at..]
                    .iter()
                    .position(|&c| c == b'}')
                    .ok_or(Stop::NotConverted)?;
                let inside = std::str::from_utf8(&self.text[self.at + 1..self.at + close])
                    .map_err(|_| Stop::NotConverted)?;
                let bounds = bounds(inside).ok_or(Stop::NotConverted)?;
                self.at += close;
                bounds
            }
            _ => return Ok(None),
        };
        self.at += 1;
        let more_than_once = max.is_none_or(|n| n > 1);
        if more_than_once && atom.min_len == 0 {
            let part = String::from_utf8_lossy(&self.text[start..self.at]).into_owned();
            return Err(Stop::EmptyRepeated(part));
        }
        Ok(Some(atom.repeated(min, max)))
    }
}

/// The length of the escape at the start of `text` as llama.cpp's `gbnf_escape_length` reads
/// it (`\t`, `\x41`, ...); any other (`\d`, `\s`) it does not convert.
fn escape_len(text: &[u8]) -> Result<usize, Stop> {
    let hex = match text.get(1) {
        Some(b't' | b'r' | b'n' | b'\\' | b'"' | b'[' | b']' | b'-') => return Ok(2),
        Some(b'x') => 2,
        Some(b'u') => 4,
        Some(b'U') => 8,
        _ => return Err(Stop::NotConverted),
    };
    let digits = text.get(2..2 + hex).ok_or(Stop::NotConverted)?;
    if digits.iter().all(u8::is_ascii_hexdigit) {
        Ok(2 + hex)
    } else {
        Err(Stop::NotConverted)
    }
}

/// `{n}`, `{m,}`, `{,n}`, `{m,n}` as llama.cpp reads them.
fn bounds(inside: &str) -> Option<(u64, Option<u64>)> {
    let number = |s: &str| s.trim().parse::<u64>().ok();
    match inside.split_once(',') {
        None => number(inside).map(|n| (n, Some(n))),
        Some((min, max)) => {
            let min = if min.is_empty() { Some(0) } else { number(min) }?;
            let max = if max.is_empty() {
                None
            } else {
                Some(number(max)?)
            };
            Some((min, max))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(pattern: &str) -> u64 {
        match pattern_cost(pattern) {
            PatternCost::Live(n) => n,
            other => panic!("{pattern}: {other:?}"),
        }
    }

    #[test]
    fn a_nested_repetition_of_what_can_match_empty_is_named() {
        for (pattern, part) in [
            ("^((a?){0,12}){0,12}$", "(a?){0,12}"),
            ("^((a?){0,30}){0,30}$", "(a?){0,30}"),
            ("^(a*)+$", "(a*)+"),
            ("^x(b|){2,3}y$", "(b|){2,3}"),
            ("^(?:a?b?)*$", "(?:a?b?)*"),
        ] {
            assert_eq!(
                pattern_cost(pattern),
                PatternCost::EmptyRepeated(part.to_owned()),
                "{pattern}"
            );
        }
        // once at most is not a repetition
        assert!(matches!(pattern_cost("^(a?)?$"), PatternCost::Live(_)));
    }

    #[test]
    fn repetitions_multiply_across_nesting_when_their_body_varies_in_length() {
        assert!(live("^((a{1,2}){1,12}){1,12}$") >= 2 * 12 * 12);
        assert!(live("^(a|aa){0,30}$") >= 30);
        // a body of one length keeps one copy live, however many there are
        assert!(live("^[a-z]{1,64}$") <= 4);
        assert!(live("^([0-9]{3}-){1,40}$") <= 4);
        // a plain literal is one stack
        assert!(live("^hello world, a long literal$") <= 2);
        // an IPv4 address: small
        assert!(
            live(
                "^((25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.){3}(25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)$"
            ) < PATTERN_LIVE_MAX
        );
        // escapes llama.cpp takes are one character each
        assert!(live(r"^[\x41-\x5A\-]{2}\u0041\.\($") <= 2);
    }

    #[test]
    fn patterns_llama_cpp_does_not_convert_cost_nothing() {
        for pattern in [
            "a{0,9}", "^a", "(?=a)", "^(?=a)$", "^(a$", "^a)$", "^a{1$", "", r"^\d{4}$", r"^[\s]$",
        ] {
            assert_eq!(
                pattern_cost(pattern),
                PatternCost::NotConverted,
                "{pattern}"
            );
        }
    }
}
