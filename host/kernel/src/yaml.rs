//! YAML that every Kubernetes tool reads back as it was written.
//!
//! kubectl, istioctl and Helm read YAML with go-yaml's YAML 1.1 rules, under which plain
//! scalars such as `yes`, `on`, `n`, `0777`, `1:20` or `2024-01-01` are booleans, numbers or
//! timestamps; serde_yaml writes them plain, as YAML 1.2 allows. [`to_string`] writes block
//! YAML in which a string is plain only when it starts with a letter, is made of letters,
//! digits, inner spaces and `._/-(),=+@`, and is none of YAML 1.1's boolean or null words;
//! every other string is double-quoted with JSON's escapes (a valid YAML double-quoted
//! scalar).

use std::fmt::Write as _;

use serde_json::Value;

/// Whether `s` may be written as a plain scalar and read back as this string by a YAML 1.1 or
/// 1.2 reader.
fn plain(s: &str) -> bool {
    const WORDS: [&str; 9] = ["y", "n", "yes", "no", "true", "false", "on", "off", "null"];
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && !s.ends_with(' ')
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b' ' | b'.' | b'_' | b'/' | b'-' | b'(' | b')' | b',' | b'=' | b'+' | b'@'
                )
        })
        && !WORDS.contains(&s.to_ascii_lowercase().as_str())
}

fn scalar(s: &str) -> String {
    if plain(s) {
        s.to_owned()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

fn leaf(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("null".into()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) => Some(scalar(s)),
        Value::Array(a) if a.is_empty() => Some("[]".into()),
        Value::Object(o) if o.is_empty() => Some("{}".into()),
        _ => None,
    }
}

fn write(out: &mut String, v: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(o) => {
            for (k, val) in o {
                match leaf(val) {
                    Some(l) => {
                        let _ = writeln!(out, "{pad}{}: {l}", scalar(k));
                    }
                    None => {
                        let _ = writeln!(out, "{pad}{}:", scalar(k));
                        // Sequences under a key sit at the key's indentation, as kubectl writes.
                        let inner = if val.is_array() { indent } else { indent + 2 };
                        write(out, val, inner);
                    }
                }
            }
        }
        Value::Array(a) => {
            for item in a {
                match leaf(item) {
                    Some(l) => {
                        let _ = writeln!(out, "{pad}- {l}");
                    }
                    None => {
                        // The item's first line follows `- `; the rest align under it.
                        let mut inner = String::new();
                        write(&mut inner, item, indent + 2);
                        let body = inner.get(indent + 2..).unwrap_or_default();
                        let _ = write!(out, "{pad}- {body}");
                    }
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", leaf(other).unwrap_or_default());
        }
    }
}

/// `value` as block YAML that YAML 1.1 and 1.2 readers (kubectl, istioctl, Helm, serde_yaml)
/// read back as `value`; module documentation.
pub fn to_string(value: &Value) -> String {
    let mut out = String::new();
    write(&mut out, value, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ambiguous_strings_are_quoted_and_read_back_as_strings() {
        let v = json!({
            "labels": {"a": "yes", "b": "on", "c": "2024-01-01", "d": "1:20", "e": "0777",
                       "f": "y", "g": "NO", "h": "1e3", "i": "~", "j": "null", "k": "0x1F",
                       "l": "", "m": "two words (a, b)", "n": "multi\nline", "o": "-x", "yes": "key",
                       "p": "x: y", "q": "a #b", "r": "end ", "s": "Yes"},
            "plain": ["reviews", "docker.io/istio/x-v1", "v1.2_3"],
            "numbers": [1, -2.5, true, null],
            "nested": [{"name": "a", "items": [{"x": 1}, []]}, {}],
            "empty": {},
        });
        let text = to_string(&v);
        let back: Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(back, v, "{text}");
        for quoted in [
            "\"yes\"",
            "\"on\"",
            "\"2024-01-01\"",
            "\"0777\"",
            "\"y\"",
            "\"NO\"",
        ] {
            assert!(text.contains(quoted), "{quoted} in {text}");
        }
        assert!(text.contains("- reviews\n"), "{text}");
        assert!(text.contains("m: two words (a, b)\n"), "{text}");
        assert!(text.contains("\"yes\": key"), "{text}");
    }

    #[test]
    fn sequences_of_maps_are_written_as_kubectl_writes_them() {
        let v =
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}});
        assert_eq!(
            to_string(&v),
            "spec:\n  containers:\n  - env:\n    - name: X\n      value: \"1\"\n    name: a\n"
        );
    }
}
