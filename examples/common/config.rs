//! `--config FILE`: a run's options from a JSON or TOML file, merged under the command
//! line (flags and environment variables win), and the resolved options written back into
//! the run directory so that the run can be repeated exactly.
//!
//! A file is one table of long option names (`batch`, `loss-chunk` or `loss_chunk`) to
//! values: strings, numbers, booleans (a flag set by `true`), or arrays for options that
//! take lists. Unknown names are refused, not ignored.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches};
use serde_json::{Map, Value};

use super::{bad_input, broke, Failure};

/// Options that steer one invocation rather than describe the run: never read from a
/// config file, never written to the resolved one.
const PER_INVOCATION: &[&str] = &[
    "config",
    "resume",
    "overwrite",
    "allow-corpus-change",
    "kernel-cache",
    "warm-cache",
    "sample-pool-ms",
    "help",
    "version",
];

/// Parses `A` from the process's arguments, with the options of `--config FILE` (if any)
/// filling in what the command line and the environment leave unset. Returns the options
/// and the matches they came from (for [`resolved`]).
pub fn parse_with_config<A: CommandFactory + FromArgMatches>() -> Result<(A, ArgMatches), Failure> {
    parse_from_with_config(std::env::args_os().collect())
}

/// [`parse_with_config`] on the arguments `argv` (the program name first).
pub fn parse_from_with_config<A: CommandFactory + FromArgMatches>(
    argv: Vec<OsString>,
) -> Result<(A, ArgMatches), Failure> {
    let command = A::command();
    // Help, version and malformed flags are clap's to report, with its exit codes.
    let given = command.clone().get_matches_from(argv.clone());
    let argv = match given.get_one::<PathBuf>("config") {
        Some(path) => {
            let table = read_table(path)?;
            let mut merged = vec![argv[0].clone()];
            merged.extend(config_args(&command, &given, &table, path)?);
            merged.extend(argv[1..].iter().cloned());
            merged
        }
        None => argv,
    };
    let matches = command.get_matches_from(argv);
    let args = A::from_arg_matches(&matches).map_err(|e| bad_input(e.to_string()))?;
    Ok((args, matches))
}

/// The file as one table, JSON or TOML by its extension.
fn read_table(path: &Path) -> Result<Map<String, Value>, Failure> {
    let text = fs::read_to_string(path).map_err(|e| bad_input(format!("--config {}: {e}", path.display())))?;
    let value: Value = match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => toml::from_str::<toml::Table>(&text)
            .map_err(|e| bad_input(format!("--config {}: not TOML: {e}", path.display())))
            .and_then(|table| serde_json::to_value(table).map_err(|e| bad_input(e.to_string())))?,
        Some("json") => {
            serde_json::from_str(&text).map_err(|e| bad_input(format!("--config {}: not JSON: {e}", path.display())))?
        }
        _ => return Err(bad_input(format!("--config {}: name a .json or .toml file", path.display()))),
    };
    match value {
        Value::Object(table) => Ok(table),
        _ => Err(bad_input(format!("--config {}: expected a table of options", path.display()))),
    }
}

/// The table as `--name=value` arguments, leaving out what the command line or the
/// environment already set.
fn config_args(
    command: &clap::Command,
    given: &ArgMatches,
    table: &Map<String, Value>,
    path: &Path,
) -> Result<Vec<OsString>, Failure> {
    let mut args = Vec::new();
    for (key, value) in table {
        let name = key.replace('_', "-");
        let wrong = |why: String| bad_input(format!("--config {}: `{key}`: {why}", path.display()));
        let Some(arg) = command.get_arguments().find(|a| a.get_long() == Some(name.as_str())) else {
            return Err(wrong(format!("no such option (the options are those of --help: {})", long_names(command))));
        };
        if PER_INVOCATION.contains(&name.as_str()) {
            return Err(wrong("give it on the command line, not in a config file".into()));
        }
        let explicit = matches!(
            given.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if explicit {
            continue;
        }
        let flag = matches!(arg.get_action(), ArgAction::SetTrue);
        match (value, flag) {
            (Value::Bool(true), true) => args.push(format!("--{name}").into()),
            (Value::Bool(false), true) => {}
            (_, true) => return Err(wrong("a flag: true or false".into())),
            (Value::String(s), false) => args.push(format!("--{name}={s}").into()),
            (Value::Number(n), false) => args.push(format!("--{name}={n}").into()),
            (Value::Array(items), false) => {
                let items: Option<Vec<String>> = items.iter().map(scalar).collect();
                let items = items.ok_or_else(|| wrong("a list of strings or numbers".into()))?;
                args.push(format!("--{name}={}", items.join(",")).into());
            }
            _ => return Err(wrong("a string, a number or a list".into())),
        }
    }
    Ok(args)
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn long_names(command: &clap::Command) -> String {
    let names: Vec<&str> =
        command.get_arguments().filter_map(|a| a.get_long()).filter(|n| !PER_INVOCATION.contains(n)).collect();
    names.join(", ")
}

/// Every option of the run as it was resolved (command line, environment, config file or
/// default), as a table `--config` reads back.
pub fn resolved(command: &clap::Command, matches: &ArgMatches) -> Map<String, Value> {
    let mut table = Map::new();
    for arg in command.get_arguments() {
        let (Some(name), id) = (arg.get_long(), arg.get_id().as_str()) else { continue };
        if PER_INVOCATION.contains(&name) {
            continue;
        }
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            table.insert(name.into(), Value::Bool(matches.get_flag(id)));
            continue;
        }
        let Some(raw) = matches.get_raw(id) else { continue };
        let values: Vec<Value> = raw.map(|v| Value::String(v.to_string_lossy().into_owned())).collect();
        let value = match <[Value; 1]>::try_from(values) {
            Ok([single]) => single,
            Err(values) => Value::Array(values),
        };
        table.insert(name.into(), value);
    }
    table
}

/// Writes a table of options as JSON to `path` (a file `--config` reads back).
pub fn save(table: Map<String, Value>, path: &Path) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(&Value::Object(table)).expect("JSON values");
    fs::write(path, json + "\n").map_err(|e| broke(format!("{}: {e}", path.display())))
}
