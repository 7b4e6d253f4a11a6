//! Metrics renamed by the naming scheme, still exported under their old
//! names for one release.
//!
//! Dashboards and alerts scrape names; renaming a metric outright would
//! silently empty them. So the recorder every service installs wraps the
//! Prometheus one: a metric registered under a new name in [`RENAMED`] is
//! also registered under its old name, with the same labels, and every
//! update goes to both. The code records only the new name; this table is
//! the one place that knows the old ones, and deleting a row is how an old
//! name is retired.
//!
//! The scheme (docs/operations.md#metric-names): the prefix names the
//! component that emits the metric — `saga_` the orchestrator,
//! `participant_` every participant built on the kit, `store_` /
//! `embedded_store_` / `mongodb_` the storage layers all services share,
//! told apart by their `service` or `db` label — and the name ends in its
//! base unit (`_seconds`, `_bytes`; `_duration_seconds` for a timing) and,
//! for a counter, `_total`.

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use std::sync::Arc;

/// `(new name, old name)`: each old name is exported beside the new one
/// until the release after the rename.
pub const RENAMED: &[(&str, &str)] = &[
    ("saga_started_total", "sagas_started_total"),
    ("saga_finished_total", "sagas_finished_total"),
    ("saga_expired_total", "sagas_expired_total"),
    ("saga_archived_total", "sagas_archived_total"),
    (
        "store_purge_batch_duration_seconds",
        "store_purge_batch_seconds",
    ),
    (
        "embedded_store_commit_duration_seconds",
        "embedded_store_commit_seconds",
    ),
    (
        "embedded_store_checkpoint_duration_seconds",
        "embedded_store_checkpoint_seconds",
    ),
];

/// The old name of a renamed metric, if `name` is a new name in [`RENAMED`].
pub fn old_name(name: &str) -> Option<&'static str> {
    RENAMED
        .iter()
        .find(|(new, _)| *new == name)
        .map(|(_, old)| *old)
}

/// A [`Recorder`] that exports every metric of [`RENAMED`] under both names.
#[derive(Debug)]
pub struct WithOldNames<R> {
    inner: R,
}

impl<R: Recorder> WithOldNames<R> {
    /// Wraps `inner`, the recorder that exports.
    pub fn new(inner: R) -> Self {
        WithOldNames { inner }
    }

    fn old_key(key: &Key) -> Option<Key> {
        let old = old_name(key.name())?;
        Some(Key::from_parts(
            old,
            key.labels().cloned().collect::<Vec<_>>(),
        ))
    }

    fn old_description(
        key: &KeyName,
        description: &SharedString,
    ) -> Option<(KeyName, SharedString)> {
        let old = old_name(key.as_str())?;
        let text = format!(
            "Deprecated: renamed {}; this name goes in the next release. {description}",
            key.as_str()
        );
        Some((KeyName::from_const_str(old), SharedString::from(text)))
    }
}

impl<R: Recorder> Recorder for WithOldNames<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some((old, text)) = Self::old_description(&key, &description) {
            self.inner.describe_counter(old, unit, text);
        }
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some((old, text)) = Self::old_description(&key, &description) {
            self.inner.describe_gauge(old, unit, text);
        }
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if let Some((old, text)) = Self::old_description(&key, &description) {
            self.inner.describe_histogram(old, unit, text);
        }
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let new = self.inner.register_counter(key, metadata);
        match Self::old_key(key) {
            Some(old) => {
                let old = self.inner.register_counter(&old, metadata);
                Counter::from_arc(Arc::new(Both(new, old)))
            }
            None => new,
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let new = self.inner.register_gauge(key, metadata);
        match Self::old_key(key) {
            Some(old) => {
                let old = self.inner.register_gauge(&old, metadata);
                Gauge::from_arc(Arc::new(Both(new, old)))
            }
            None => new,
        }
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        let new = self.inner.register_histogram(key, metadata);
        match Self::old_key(key) {
            Some(old) => {
                let old = self.inner.register_histogram(&old, metadata);
                Histogram::from_arc(Arc::new(Both(new, old)))
            }
            None => new,
        }
    }
}

/// One update, applied to the metric under its new and its old name.
struct Both<M>(M, M);

impl CounterFn for Both<Counter> {
    fn increment(&self, value: u64) {
        self.0.increment(value);
        self.1.increment(value);
    }

    fn absolute(&self, value: u64) {
        self.0.absolute(value);
        self.1.absolute(value);
    }
}

impl GaugeFn for Both<Gauge> {
    fn increment(&self, value: f64) {
        self.0.increment(value);
        self.1.increment(value);
    }

    fn decrement(&self, value: f64) {
        self.0.decrement(value);
        self.1.decrement(value);
    }

    fn set(&self, value: f64) {
        self.0.set(value);
        self.1.set(value);
    }
}

impl HistogramFn for Both<Histogram> {
    fn record(&self, value: f64) {
        self.0.record(value);
        self.1.record(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    /// Renders what `record` sent through the wrapped recorder.
    fn exported(record: impl FnOnce()) -> String {
        let prometheus = PrometheusBuilder::new().build_recorder();
        let handle = prometheus.handle();
        metrics::with_local_recorder(&WithOldNames::new(prometheus), record);
        handle.render()
    }

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|value| value.parse().ok())
    }

    #[test]
    fn a_renamed_counter_is_exported_under_both_names_with_its_labels() {
        let text = exported(|| {
            metrics::describe_counter!("saga_finished_total", "Sagas that finished.");
            metrics::counter!("saga_finished_total", "status" => "completed").increment(2);
            metrics::counter!("saga_finished_total", "status" => "completed").increment(1);
            metrics::counter!("saga_compensations_total").increment(1);
        });
        let new = r#"saga_finished_total{status="completed"}"#;
        let old = r#"sagas_finished_total{status="completed"}"#;
        assert_eq!(sample(&text, new), Some(3.0), "{text}");
        assert_eq!(sample(&text, old), Some(3.0), "{text}");
        assert!(
            text.contains("# HELP sagas_finished_total Deprecated: renamed saga_finished_total"),
            "{text}"
        );
        assert_eq!(sample(&text, "saga_compensations_total"), Some(1.0));
        assert!(
            !text.contains("sagas_compensations_total"),
            "a name that was not renamed is exported once: {text}"
        );
    }

    #[test]
    fn renamed_gauges_and_histograms_get_every_update() {
        let text = exported(|| {
            // Not renamed, but the wrapper must pass gauges through untouched.
            metrics::gauge!("saga_in_flight").set(4.0);
            metrics::gauge!("saga_in_flight").decrement(1.0);
            metrics::histogram!("store_purge_batch_duration_seconds", "service" => "payment")
                .record(0.5);
            metrics::histogram!("store_purge_batch_duration_seconds", "service" => "payment")
                .record(1.5);
        });
        assert_eq!(sample(&text, "saga_in_flight"), Some(3.0), "{text}");
        for name in [
            "store_purge_batch_duration_seconds",
            "store_purge_batch_seconds",
        ] {
            let count = format!(r#"{name}_count{{service="payment"}}"#);
            let sum = format!(r#"{name}_sum{{service="payment"}}"#);
            assert_eq!(sample(&text, &count), Some(2.0), "{text}");
            assert_eq!(sample(&text, &sum), Some(2.0), "{text}");
        }
    }

    #[test]
    fn the_table_follows_the_scheme() {
        for (new, old) in RENAMED {
            assert_ne!(new, old);
            assert!(
                [
                    "saga_",
                    "participant_",
                    "store_",
                    "embedded_store_",
                    "mongodb_"
                ]
                .iter()
                .any(|prefix| new.starts_with(prefix)),
                "{new}: unknown prefix"
            );
            assert!(
                new.ends_with("_total") || new.ends_with("_seconds") || new.ends_with("_bytes"),
                "{new}: no unit or _total"
            );
            assert_eq!(old_name(new), Some(*old));
            assert_eq!(old_name(old), None, "{old} is not itself renamed");
        }
    }
}
