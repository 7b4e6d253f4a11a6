//! Command monitoring: every command a service sends MongoDB is a network
//! round trip in production, and no stand-in's speed says anything about
//! mongod's — so commands are counted, not timed.
//!
//! [`connect`](crate::connect) installs [`handler`] on every client:
//!
//! - each command started is counted in
//!   `mongodb_commands_total{service, command}` (Prometheus, through the
//!   `metrics` facade), so `loadgen` can report commands per saga per
//!   service, and an operator can see the same in production;
//! - when [`record_query_shapes`] was called (the query-plan test does),
//!   the shape of every query — collection, filter keys and operators,
//!   sort — is kept once with one example, so each can be `explain`ed
//!   ([`query_shapes`]);
//! - when [`record_commands`] was called (the durability test does), every
//!   command is kept whole ([`recorded_commands`]).

use bson::{Bson, Document};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

static SHAPES_ON: AtomicBool = AtomicBool::new(false);
static SHAPES: Mutex<BTreeMap<String, QueryShape>> = Mutex::new(BTreeMap::new());
static COMMANDS_ON: AtomicBool = AtomicBool::new(false);
static COMMANDS: Mutex<Vec<RecordedCommand>> = Mutex::new(Vec::new());

/// One kind of query a service sends: where, which fields with which
/// operators, sorted how — with the first filter seen as an example.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryShape {
    /// The service (client app name) that sent it.
    pub service: String,
    /// Database and collection.
    pub database: String,
    /// The collection queried.
    pub collection: String,
    /// `find`, `update`, `delete`, `findAndModify`, `count`, `aggregate`.
    pub command: String,
    /// The filter as first seen (real values, runnable by `explain`).
    pub filter: Document,
    /// The sort, if any.
    pub sort: Option<Document>,
    /// The index hint, if the query names one (the server then uses it).
    pub hint: Option<Bson>,
    /// The shape: the filter with every value replaced by `?`.
    pub shape: String,
}

/// One command as sent (for checks of what every write carries).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCommand {
    /// The service (client app name) that sent it.
    pub service: String,
    /// The command name.
    pub name: String,
    /// The command document.
    pub body: Document,
}

/// Starts keeping query shapes (process-wide; for tests).
pub fn record_query_shapes() {
    SHAPES_ON.store(true, Ordering::SeqCst);
}

/// Every query shape seen since [`record_query_shapes`].
pub fn query_shapes() -> Vec<QueryShape> {
    SHAPES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .cloned()
        .collect()
}

/// Starts keeping every command (process-wide; for tests).
pub fn record_commands() {
    COMMANDS_ON.store(true, Ordering::SeqCst);
}

/// Every command sent since [`record_commands`].
pub fn recorded_commands() -> Vec<RecordedCommand> {
    COMMANDS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// The command-monitoring handler of `service`'s client.
pub fn handler(service: &str) -> EventHandler<CommandEvent> {
    let service = service.to_owned();
    EventHandler::callback(move |event| {
        if let CommandEvent::Started(started) = event {
            metrics::counter!(
                "mongodb_commands_total",
                "service" => service.clone(),
                "command" => started.command_name.clone()
            )
            .increment(1);
            if COMMANDS_ON.load(Ordering::Relaxed) {
                COMMANDS
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(RecordedCommand {
                        service: service.clone(),
                        name: started.command_name.clone(),
                        body: started.command.clone(),
                    });
            }
            if SHAPES_ON.load(Ordering::Relaxed) {
                for shape in shapes_of(
                    &service,
                    &started.db,
                    &started.command_name,
                    &started.command,
                ) {
                    SHAPES
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(key(&shape))
                        .or_insert(shape);
                }
            }
        }
    })
}

fn key(shape: &QueryShape) -> String {
    format!(
        "{} {}.{} {} {} sort {}",
        shape.service,
        shape.database,
        shape.collection,
        shape.command,
        shape.shape,
        shape
            .sort
            .as_ref()
            .map(Document::to_string)
            .unwrap_or_default()
    )
}

/// The queries inside one command (an update or delete may carry several).
fn shapes_of(service: &str, db: &str, name: &str, command: &Document) -> Vec<QueryShape> {
    let collection = command.get_str(name).unwrap_or_default().to_owned();
    let shape_hinted =
        |filter: &Document, sort: Option<&Document>, hint: Option<&Bson>| QueryShape {
            service: service.to_owned(),
            database: db.to_owned(),
            collection: collection.clone(),
            command: name.to_owned(),
            filter: filter.clone(),
            sort: sort.cloned(),
            hint: hint.cloned(),
            shape: shape_of(filter).to_string(),
        };
    let shape = |filter: &Document, sort: Option<&Document>| {
        shape_hinted(filter, sort, command.get("hint"))
    };
    let statements = |list: &str| -> Vec<QueryShape> {
        command
            .get_array(list)
            .map(|statements| {
                statements
                    .iter()
                    .filter_map(Bson::as_document)
                    .filter_map(|s| Some((s.get_document("q").ok()?, s.get("hint"))))
                    .map(|(q, hint)| shape_hinted(q, None, hint))
                    .collect()
            })
            .unwrap_or_default()
    };
    match name {
        "find" => command
            .get_document("filter")
            .map(|f| vec![shape(f, command.get_document("sort").ok())])
            .unwrap_or_else(|_| vec![shape(&Document::new(), command.get_document("sort").ok())]),
        "findAndModify" => command
            .get_document("query")
            .map(|q| vec![shape(q, command.get_document("sort").ok())])
            .unwrap_or_default(),
        "count" | "distinct" => command
            .get_document("query")
            .map(|q| vec![shape(q, None)])
            .unwrap_or_else(|_| vec![shape(&Document::new(), None)]),
        "aggregate" => first_match(command)
            .map(|m| vec![shape(&m, None)])
            .unwrap_or_default(),
        "update" => statements("updates"),
        "delete" => statements("deletes"),
        _ => Vec::new(),
    }
}

/// The `$match` an aggregation starts with.
fn first_match(command: &Document) -> Option<Document> {
    let stage = command.get_array("pipeline").ok()?.first()?.as_document()?;
    stage.get_document("$match").ok().cloned()
}

/// `filter` with every value replaced by `"?"`, operators kept.
pub fn shape_of(filter: &Document) -> Document {
    let mut shape = Document::new();
    for (key, value) in filter {
        let shaped = match value {
            Bson::Document(inner) if inner.keys().any(|k| k.starts_with('$')) => {
                Bson::Document(shape_of(inner))
            }
            // `$or`/`$and`/`$nor`: each branch is a filter of its own.
            Bson::Array(items)
                if items.iter().all(|i| matches!(i, Bson::Document(_))) && key.starts_with('$') =>
            {
                Bson::Array(
                    items
                        .iter()
                        .filter_map(Bson::as_document)
                        .map(|d| Bson::Document(shape_of(d)))
                        .collect(),
                )
            }
            _ => Bson::String("?".into()),
        };
        shape.insert(key.clone(), shaped);
    }
    shape
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn shapes_keep_fields_and_operators_and_drop_values() {
        let filter = doc! {
            "status": { "$in": ["running", "compensating"] },
            "$or": [ { "lease_until_ms": { "$lt": 5_i64 } }, { "lease_owner": "x" } ],
            "_id": "abc",
        };
        assert_eq!(
            shape_of(&filter),
            doc! {
                "status": { "$in": "?" },
                "$or": [ { "lease_until_ms": { "$lt": "?" } }, { "lease_owner": "?" } ],
                "_id": "?",
            }
        );
    }

    #[test]
    fn every_query_of_a_command_is_found() {
        let update = doc! {
            "update": "products",
            "updates": [
                { "q": { "_id": "a", "available": { "$gte": 2_i64 } }, "u": {} },
                { "q": { "_id": "b" }, "u": {} },
            ],
        };
        let found = shapes_of("svc", "db", "update", &update);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].collection, "products");
        assert_eq!(
            found[0].shape,
            doc! { "_id": "?", "available": { "$gte": "?" } }.to_string()
        );
        let find = doc! { "find": "sagas", "filter": { "status": "failed" }, "sort": { "created_at_ms": -1 } };
        let found = shapes_of("svc", "db", "find", &find);
        assert_eq!(found[0].sort, Some(doc! { "created_at_ms": -1 }));
        assert!(shapes_of("svc", "db", "insert", &doc! { "insert": "x" }).is_empty());
    }
}
