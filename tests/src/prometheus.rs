//! Prometheus scrapes for the tests and tools: `GET /metrics`, the text
//! exposition format parsed, and lookups by name and labels. The one parser
//! of the tests, the chaos soak and the load generator.
//!
//! Why a parser of our own rather than the `prometheus-parse` crate: that
//! crate splits labels on `,` and `=` without reading quotes or escapes, so
//! a label value holding either is silently cut; it drops a line it cannot
//! read instead of saying so (a test must see a malformed exposition);
//! it folds a histogram's `_bucket` lines into one value per series, where
//! the tests look buckets up by their `le` label; it has seen no release
//! since 2023 and brings chrono and a second itertools. The format is small
//! (version 0.0.4: a sample per line, `#` lines skipped), and
//! [`parse_exposition`] reads all of it that the services export, with a
//! line number in every error.

use crate::http;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// One sample line: `name{label="value",…} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// Parses the Prometheus text exposition format (version 0.0.4): comment
/// and blank lines are skipped; label values may hold `\\`, `\"` and `\n`
/// escapes; an optional timestamp after the value is ignored.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut samples = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = parse_sample(line).map_err(|e| format!("line {}: {e}: {line}", number + 1))?;
        samples.push(sample);
    }
    Ok(samples)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    let valid_name = name.chars().enumerate().all(|(i, c)| {
        c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
    });
    if name.is_empty() || !valid_name {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let mut chars = after_brace.char_indices().peekable();
        loop {
            // Skip separators before the next label (or the closing brace).
            while let Some(&(_, c)) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    chars.next();
                } else {
                    break;
                }
            }
            let &(start, c) = chars.peek().ok_or("unterminated labels")?;
            if c == '}' {
                chars.next();
                rest = &after_brace[start + 1..];
                break;
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            let key = key.trim().to_owned();
            if key.is_empty() {
                return Err("empty label name".into());
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {key}: value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")? {
                    (_, '"') => break,
                    (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    (_, c) => value.push(c),
                }
            }
            labels.insert(key, value);
        }
    }
    let value = rest.split_whitespace().next().ok_or("no value")?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|e| format!("bad value {v:?}: {e}"))?,
    };
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// A parsed scrape.
pub struct Scrape {
    /// Every sample.
    pub samples: Vec<Sample>,
    /// The exposition as served.
    pub text: String,
}

impl Scrape {
    /// `text`, a text exposition, parsed.
    pub fn parse(text: String) -> Result<Scrape, String> {
        let samples = parse_exposition(&text)?;
        Ok(Scrape { samples, text })
    }

    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// Sum over the matching samples; 0 when none (an untouched counter is
    /// not exported).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// The value of the one sample named `name` with exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self
            .matching(name, labels)
            .filter(|s| s.labels.len() == labels.len())
            .collect();
        assert!(found.len() <= 1, "{name}{labels:?} is ambiguous: {found:?}");
        found.first().map(|s| s.value)
    }

    /// Like [`Scrape::value`], panicking (with the scrape) when absent.
    pub fn expect(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("{name}{labels:?} not exported; scrape:\n{}", self.text))
    }
}

/// `GET /metrics` from the exporter at `addr`, parsed; why not when the
/// exporter cannot be reached, answers another status, or serves an
/// exposition that does not parse.
pub async fn fetch(addr: SocketAddr) -> Result<Scrape, String> {
    let (status, text) = http::get(addr, "/metrics").await?;
    if status != 200 {
        return Err(format!(
            "GET http://{addr}/metrics: status {status}: {text}"
        ));
    }
    Scrape::parse(text.clone()).map_err(|e| format!("{addr}/metrics: {e}\n{text}"))
}

/// [`fetch`], failing the test when it fails.
pub async fn scrape(addr: SocketAddr) -> Scrape {
    fetch(addr).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Scrapes until `done` holds (metrics recorded after a reply was sent,
/// e.g. when the saga's task ends, may lag the reply a little).
pub async fn scrape_until(addr: SocketAddr, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let scrape = scrape(addr).await;
        if done(&scrape) || tokio::time::Instant::now() >= deadline {
            return scrape;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_parser_reads_labels_escapes_and_special_values() {
        let text = "# HELP x_total Things.\n# TYPE x_total counter\n\
            x_total 3\n\
            y_total{kind=\"charge\",result=\"applied\"} 2 1700000000000\n\
            z{a=\"q\\\"uo\\\\te\\n\", b=\"{,}\",} +Inf\n\
            h_bucket{le=\"0.5\"} 1e3\n";
        let samples = parse_exposition(text).unwrap();
        assert_eq!(samples.len(), 4);
        assert_eq!(samples[0].name, "x_total");
        assert!(samples[0].labels.is_empty());
        assert_eq!(samples[0].value, 3.0);
        assert_eq!(samples[1].labels["kind"], "charge");
        assert_eq!(samples[1].labels["result"], "applied");
        assert_eq!(samples[1].value, 2.0);
        assert_eq!(samples[2].labels["a"], "q\"uo\\te\n");
        assert_eq!(samples[2].labels["b"], "{,}");
        assert_eq!(samples[2].value, f64::INFINITY);
        assert_eq!(samples[3].value, 1000.0);
        assert!(parse_exposition("bad{a=b} 1").is_err());
        assert!(parse_exposition("bad{a=\"b\"").is_err());
        assert!(parse_exposition("bad 1x").is_err());
    }
}
