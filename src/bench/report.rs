//! What a run prints: a table for people, and a JSON document with every request's record.

use super::client::Record;
use serde::Serialize;
use serde_json::Value;

/// The nearest-rank percentile (`p` in 0..=100) of `values`; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// One line of the summary: a name and a value with its unit.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub name: String,
    pub value: Option<f64>,
    pub unit: &'static str,
}

impl Line {
    pub fn new(name: impl Into<String>, value: Option<f64>, unit: &'static str) -> Self {
        Self {
            name: name.into(),
            value,
            unit,
        }
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub label: Option<String>,
    pub base_url: String,
    /// The scenario's parameters as given.
    pub parameters: Value,
    pub summary: Vec<Line>,
    /// Notes: what the server said, checks that failed.
    pub notes: Vec<String>,
    pub records: Vec<Record>,
}

impl Report {
    /// The table people read.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{}{} against {}\n",
            self.scenario,
            self.label
                .as_ref()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default(),
            self.base_url
        );
        let width = self.summary.iter().map(|l| l.name.len()).max().unwrap_or(0);
        for line in &self.summary {
            let value = match line.value {
                Some(v) => format!("{v:.3} {}", line.unit),
                None => "-".to_owned(),
            };
            out.push_str(&format!("  {:width$}  {value}\n", line.name));
        }
        for note in &self.notes {
            out.push_str(&format!("  note: {note}\n"));
        }
        out.push_str(&format!("  {} requests recorded\n", self.records.len()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&v, 50.0), Some(3.0));
        assert_eq!(percentile(&v, 95.0), Some(5.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
