//! The samples of a Prometheus text exposition (version 0.0.4): each line
//! `name{label="value",...} number [timestamp]`, comments and blank lines skipped.
//!
//! Written here, not taken from a crate: the one text-format parser on crates.io,
//! `prometheus-parse` 0.2.5, matches metric names with `\w+` and so drops every sample whose
//! name holds a colon, which is every sample of vLLM (`vllm:...`), SGLang (`sglang:...`) and
//! llama-server (`llamacpp:...`). `prometheus-client`, which the app uses for its own
//! `/metrics`, only writes the format.

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct PrometheusSample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl PrometheusSample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of `text`; a line that is not a well-formed sample is skipped (one engine's
/// odd line must not hide the others').
pub fn parse_prometheus_text(text: &str) -> Vec<PrometheusSample> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(sample)
        .collect()
}

fn sample(line: &str) -> Option<PrometheusSample> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let rest = &line[name_end..];
    let (labels, rest) = match rest.strip_prefix('{') {
        Some(inside) => labels(inside)?,
        None => (Vec::new(), rest),
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(PrometheusSample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// The labels of `key="value",...}` and what follows the closing brace. A value's `\"`, `\\`
/// and `\n` are unescaped; a comma or a brace inside quotes is part of the value.
fn labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Some((out, rest));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_owned();
        let mut chars = s[eq + 1..].trim_start().char_indices();
        let offset = s.len() - s[eq + 1..].trim_start().len();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => {
                    end = Some(offset + i + 1);
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((key, value));
        s = s[end?..].trim_start();
        s = s.strip_prefix(',').unwrap_or(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_colons_labels_with_quotes_commas_and_braces_and_exponents_are_read() {
        let text = "# HELP vllm:x help\n# TYPE vllm:x gauge\n\
            vllm:x{engine=\"0\",model_name=\"a, \\\"b\\\" {c}\"} 1.8432e+06\n\
            llamacpp:requests_deferred 2\n\
            up{} +Inf 1700000000\n\
            bad line here\n";
        let samples = parse_prometheus_text(text);
        assert_eq!(samples.len(), 3, "{samples:?}");
        assert_eq!(samples[0].name, "vllm:x");
        assert_eq!(samples[0].label("model_name"), Some("a, \"b\" {c}"));
        assert_eq!(samples[0].label("engine"), Some("0"));
        assert_eq!(samples[0].value, 1_843_200.0);
        assert_eq!(samples[1].name, "llamacpp:requests_deferred");
        assert!(samples[1].labels.is_empty());
        assert_eq!(samples[1].value, 2.0);
        assert_eq!(samples[2].value, f64::INFINITY);
    }

    #[test]
    fn a_label_value_left_open_drops_only_its_line() {
        let samples = parse_prometheus_text("a{x=\"open} 1\nb 2\n");
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].name, "b");
    }
}
