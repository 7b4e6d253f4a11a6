//! Environment variables renamed by the naming scheme, still read under
//! their old names for one release.
//!
//! The scheme (docs/operations.md#environment-variables): a variable carries
//! the service's prefix (`ORCHESTRATOR_`, `PAYMENT_`, `INVENTORY_`, …) when
//! its value must differ between the services of one deployment — where it
//! listens, where it keeps files, which database it uses, who it is — and is
//! bare when one value is meant for the whole deployment (`MONGODB_URI`, the
//! tokens, the saga limits the participants size their retention by). A
//! number carries its unit (`_MS`, `_BYTES`); a duration written `7d` or
//! `10s` does not.
//!
//! A deployment that still sets an old name keeps working: before clap
//! parses, the old variable's value becomes the default of the flag the new
//! variable belongs to, so the precedence stays flag > new variable > old
//! variable > built-in default, and the binary logs a warning naming the
//! replacement. Nothing here writes the process environment.

use clap::{Arg, ArgMatches, Command, CommandFactory, FromArgMatches};
use std::ffi::{OsStr, OsString};

/// An old variable that was set when the binary started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OldNameInUse {
    /// The variable that was set.
    pub old: &'static str,
    /// The variable to set instead.
    pub new: &'static str,
    /// The new variable was set too, so the old one was ignored.
    pub ignored: bool,
}

impl OldNameInUse {
    /// Logs the deprecation: to be called once logging is set up.
    pub fn warn(&self) {
        if self.ignored {
            tracing::warn!(
                old = self.old,
                new = self.new,
                "{} is ignored because {} is set; remove {}",
                self.old,
                self.new,
                self.old
            );
        } else {
            tracing::warn!(
                old = self.old,
                new = self.new,
                "{} is deprecated and will not be read after this release; set {} instead",
                self.old,
                self.new
            );
        }
    }
}

/// Parses the process's arguments into `P`, reading each `(new, old)`
/// variable of `renamed` under its old name where only that one is set.
/// Exits with clap's message on bad arguments, as `P::parse` does.
pub fn parse<P: CommandFactory + FromArgMatches>(
    renamed: &[(&'static str, &'static str)],
) -> (P, Vec<OldNameInUse>) {
    match parse_from(renamed, std::env::args_os(), |name| std::env::var_os(name)) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    }
}

/// [`parse`] over `args`, with `lookup` reading the environment.
pub fn parse_from<P: CommandFactory + FromArgMatches>(
    renamed: &[(&'static str, &'static str)],
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<(P, Vec<OldNameInUse>), clap::Error> {
    let mut command = P::command();
    let mut in_use = Vec::new();
    for &(new, old) in renamed {
        let Some(value) = lookup(old) else { continue };
        let ignored = lookup(new).is_some();
        if !ignored {
            // Leaked once per renamed variable at start-up: clap keeps
            // defaults as `'static`.
            let value: &'static OsStr = Box::leak(value.into_boxed_os_str());
            command = default_for_env(command, new, value);
        }
        in_use.push(OldNameInUse { old, new, ignored });
    }
    let mut matches: ArgMatches = command.try_get_matches_from(args)?;
    Ok((P::from_arg_matches_mut(&mut matches)?, in_use))
}

/// `command` with `value` as the default of every flag read from `env`, in
/// every subcommand too.
fn default_for_env(command: Command, env: &'static str, value: &'static OsStr) -> Command {
    command
        .mut_args(|arg: Arg| {
            if arg.get_env() == Some(OsStr::new(env)) {
                arg.default_value(value)
            } else {
                arg
            }
        })
        .mut_subcommands(|sub| default_for_env(sub, env, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Option<Sub>,
        #[command(flatten)]
        serve: Serve,
    }

    #[derive(Debug, clap::Subcommand)]
    enum Sub {
        Serve(Serve),
    }

    #[derive(Debug, clap::Args)]
    struct Serve {
        #[arg(
            long,
            env = "RENAMED_ENV_TEST_NEW_LISTEN",
            default_value = "127.0.0.1:1"
        )]
        listen: String,
        #[arg(long, env = "RENAMED_ENV_TEST_OTHER", default_value = "other")]
        other: String,
    }

    const RENAMED: &[(&str, &str)] =
        &[("RENAMED_ENV_TEST_NEW_LISTEN", "RENAMED_ENV_TEST_OLD_LISTEN")];

    fn parse(args: &[&str], env: &[(&str, &str)]) -> (Cli, Vec<OldNameInUse>) {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse_from(RENAMED, args, |name| env.get(name).map(OsString::from))
            .expect("the arguments parse")
    }

    fn listen(cli: &Cli) -> &str {
        match &cli.command {
            Some(Sub::Serve(serve)) => &serve.listen,
            None => &cli.serve.listen,
        }
    }

    #[test]
    fn an_old_name_alone_is_read_and_reported() {
        let env = [("RENAMED_ENV_TEST_OLD_LISTEN", "0.0.0.0:9")];
        for args in [&["x"][..], &["x", "serve"][..]] {
            let (cli, in_use) = parse(args, &env);
            assert_eq!(listen(&cli), "0.0.0.0:9", "{args:?}");
            assert_eq!(cli.serve.other, "other");
            assert_eq!(
                in_use,
                vec![OldNameInUse {
                    old: "RENAMED_ENV_TEST_OLD_LISTEN",
                    new: "RENAMED_ENV_TEST_NEW_LISTEN",
                    ignored: false
                }]
            );
        }
    }

    #[test]
    fn a_flag_beats_the_old_name_and_no_old_name_changes_nothing() {
        let env = [("RENAMED_ENV_TEST_OLD_LISTEN", "0.0.0.0:9")];
        let (cli, _) = parse(&["x", "--listen", "10.0.0.1:5"], &env);
        assert_eq!(listen(&cli), "10.0.0.1:5");
        let (cli, in_use) = parse(&["x"], &[]);
        assert_eq!(listen(&cli), "127.0.0.1:1");
        assert!(in_use.is_empty());
    }

    #[test]
    fn the_new_name_wins_and_the_old_one_is_reported_ignored() {
        let env = [
            ("RENAMED_ENV_TEST_OLD_LISTEN", "0.0.0.0:9"),
            ("RENAMED_ENV_TEST_NEW_LISTEN", "set"),
        ];
        let (cli, in_use) = parse(&["x"], &env);
        // clap reads the new variable from the real environment, where it
        // is unset here: what matters is that the old value was not taken.
        assert_eq!(listen(&cli), "127.0.0.1:1");
        assert!(in_use[0].ignored);
    }

    #[test]
    fn bad_arguments_are_still_clap_errors() {
        let error = parse_from::<Cli>(RENAMED, ["x", "--nope"], |_| None).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument);
    }
}
