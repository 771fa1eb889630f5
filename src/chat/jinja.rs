//! The Jinja environment chat templates run in: minijinja with what Hugging Face's
//! `apply_chat_template` gives templates (trim_blocks and lstrip_blocks, `raise_exception`,
//! `strftime_now`, Python's string and dict methods, `tojson` as `json.dumps` writes it, loop
//! `break`/`continue`), and the templates' source made digestible (the `{% generation %}`
//! training tag removed).

use minijinja::{Environment, ErrorKind};
use serde_json::Value;
use std::time::{SystemTime, UNIX_EPOCH};

/// An environment holding `source` as the template `chat`.
pub fn environment(source: &str) -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    // as Hugging Face and llama.cpp render chat templates
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.add_filter(
        "tojson",
        |value: minijinja::Value,
         kwargs: minijinja::value::Kwargs|
         -> Result<String, minijinja::Error> {
            let indent: Option<usize> = kwargs.get("indent")?;
            // `ensure_ascii` is accepted; non-ASCII text stays as it is (what models were
            // trained on with Hugging Face's default).
            let _: Option<bool> = kwargs.get("ensure_ascii")?;
            let _: Option<minijinja::Value> = kwargs.get("separators")?;
            let _: Option<bool> = kwargs.get("sort_keys")?;
            kwargs.assert_all_used()?;
            let json = serde_json::to_value(&value)
                .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
            let mut out = String::new();
            match indent {
                Some(width) => python_json_indented(&json, width, 0, &mut out),
                None => python_json(&json, &mut out),
            }
            Ok(out)
        },
    );
    env.add_filter(
        "from_json",
        |text: String| -> Result<minijinja::Value, minijinja::Error> {
            serde_json::from_str::<Value>(&text)
                .map(minijinja::Value::from_serialize)
                .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))
        },
    );
    env.add_function(
        "raise_exception",
        |message: String| -> Result<(), minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    env.add_function("strftime_now", |format: String| -> String {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        strftime(&format, secs)
    });
    env.add_template_owned("chat", digestible(source))?;
    Ok(env)
}

/// The source without Hugging Face's `{% generation %}` … `{% endgeneration %}` training
/// markers (they mark the assistant's tokens for training and render nothing).
fn digestible(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        let Some(close) = rest[open..].find("%}") else {
            break;
        };
        let tag = &rest[open + 2..open + close];
        let word = tag.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        out.push_str(&rest[..open]);
        if word != "generation" && word != "endgeneration" {
            out.push_str(&rest[open..open + close + 2]);
        }
        rest = &rest[open + close + 2..];
    }
    out.push_str(rest);
    out
}

/// JSON as Python's `json.dumps(value, ensure_ascii=False)` writes it (`", "` and `": "`), the
/// form Hugging Face templates' `tojson` produces and models were trained on. Hand-written:
/// serde_json's formatters give either no spaces or newlines, and minijinja's own `tojson`
/// escapes `<`, `>` and `&` for HTML.
pub fn python_json(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push_str(": ");
                python_json(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// `json.dumps(value, indent=width, ensure_ascii=False)`: one item per line, `","` at line
/// ends, empty containers as `[]` and `{}`.
fn python_json_indented(value: &Value, width: usize, depth: usize, out: &mut String) {
    let pad = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&" ".repeat(width * depth));
    };
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, depth + 1);
                python_json_indented(item, width, depth + 1, out);
            }
            pad(out, depth);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, depth + 1);
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push_str(": ");
                python_json_indented(item, width, depth + 1, out);
            }
            pad(out, depth);
            out.push('}');
        }
        other => python_json(other, out),
    }
}

/// `time.strftime(format)` in UTC for the directives templates use (`%Y %y %m %d %e %B %b %A
/// %a %H %M %S %j %%`); any other directive is kept as written. Hand-written: a date in a
/// system prompt is all it is for, and no date crate is in the tree.
fn strftime(format: &str, unix_secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = unix_secs / 86_400;
    let secs_of_day = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('%');
            break;
        };
        let month_name = MONTHS[(month - 1) as usize];
        let day_name = DAYS[(days % 7) as usize];
        match d {
            'Y' => out.push_str(&year.to_string()),
            'y' => out.push_str(&format!("{:02}", year % 100)),
            'm' => out.push_str(&format!("{month:02}")),
            'd' => out.push_str(&format!("{day:02}")),
            'e' => out.push_str(&format!("{day:>2}")),
            'B' => out.push_str(month_name),
            'b' => out.push_str(&month_name[..3]),
            'A' => out.push_str(day_name),
            'a' => out.push_str(&day_name[..3]),
            'H' => out.push_str(&format!("{:02}", secs_of_day / 3600)),
            'M' => out.push_str(&format!("{:02}", secs_of_day / 60 % 60)),
            'S' => out.push_str(&format!("{:02}", secs_of_day % 60)),
            'j' => out.push_str(&format!("{day_of_year:03}")),
            '%' => out.push('%'),
            other => {
                out.push('%');
                out.push(other);
            }
        }
    }
    out
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strftime_writes_the_dates_templates_ask_for() {
        // 2024-07-26 13:25:09 UTC, a Friday, day 208
        let t = 1_722_000_309;
        assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
        assert_eq!(strftime("%Y-%m-%d", t), "2024-07-26");
        assert_eq!(
            strftime("%A %B %e, %H:%M:%S %j %y %%", t),
            "Friday July 26, 13:25:09 208 24 %"
        );
        assert_eq!(strftime("%d/%m/%Y", 0), "01/01/1970");
        assert_eq!(strftime("%Y-%m-%d", 951_782_400), "2000-02-29");
    }

    #[test]
    fn tojson_with_indent_is_pythons_json_dumps_with_indent() {
        let v = json!({"a": [1, {"b": "x"}], "c": {}, "d": []});
        let mut out = String::new();
        python_json_indented(&v, 4, 0, &mut out);
        assert_eq!(
            out,
            "{\n    \"a\": [\n        1,\n        {\n            \"b\": \"x\"\n        }\n    ],\n    \"c\": {},\n    \"d\": []\n}"
        );
    }

    #[test]
    fn the_generation_training_tag_renders_nothing() {
        let env = environment("a{% generation %}b{%- endgeneration -%}c{% if true %}d{% endif %}")
            .unwrap();
        assert_eq!(
            env.get_template("chat").unwrap().render(()).unwrap(),
            "abcd"
        );
    }

    #[test]
    fn loops_may_break_and_blocks_trim_as_hugging_face_renders_them() {
        let env = environment(
            "{% for x in [1, 2, 3] %}\n  {% if x == 2 %}{% break %}{% endif %}\n{{ x }}\n{% endfor %}",
        )
        .unwrap();
        assert_eq!(env.get_template("chat").unwrap().render(()).unwrap(), "1\n");
    }
}
