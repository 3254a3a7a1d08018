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

/// Options by long name, as a config file holds them.
type Table = Map<String, Value>;

/// Parses `A` from the process's arguments, with the options of `--config FILE` (if any)
/// filling in what the command line and the environment leave unset, and, with
/// `--resume`, the run's own saved options (`config-<mode>.json` in `--out`) under both;
/// see [`parse_from_with_config`]. Returns the options and the matches they came from
/// (for [`resolved`]).
pub fn parse_with_config<A: CommandFactory + FromArgMatches>(
    fixed_on_resume: &[&str],
) -> Result<(A, ArgMatches), Failure> {
    parse_from_with_config(std::env::args_os().collect(), fixed_on_resume)
}

/// [`parse_with_config`] on the arguments `argv` (the program name first).
///
/// A resumed run starts from the options it was started with, so `--resume` alone
/// continues it as it was: the command line (and `--config`) may change what is safe to
/// change (steps, cadences, output, backend, execution), and a value of one of
/// `fixed_on_resume` (the options that shape the model, the batches or the schedule in
/// the checkpoint) other than the saved one is refused as bad input, naming both values.
/// A run directory without saved options resumes from the command line alone, with a
/// warning.
pub fn parse_from_with_config<A: CommandFactory + FromArgMatches>(
    argv: Vec<OsString>,
    fixed_on_resume: &[&str],
) -> Result<(A, ArgMatches), Failure> {
    let command = A::command();
    // Help, version and malformed flags are clap's to report, with its exit codes.
    let given = command.clone().get_matches_from(argv.clone());
    let table = match given.get_one::<PathBuf>("config") {
        Some(path) => Some((read_table(path)?, path.clone())),
        None => None,
    };
    let saved = saved_run_options(&command, &given)?;
    let mut merged = vec![argv[0].clone()];
    if let Some((saved, path)) = &saved {
        // Under the config file: its options count as given.
        let mut under = saved.clone();
        under.retain(|key, _| table.as_ref().is_none_or(|(table, _)| !table.contains_key(key)));
        merged.extend(config_args(&command, &given, &under, path)?);
    }
    if let Some((table, path)) = &table {
        merged.extend(config_args(&command, &given, table, path)?);
    }
    merged.extend(argv[1..].iter().cloned());
    let matches = command.clone().get_matches_from(merged);
    if let Some((saved, path)) = &saved {
        check_fixed(&command, &given, table.as_ref().map(|(table, _)| table), &matches, saved, path, fixed_on_resume)?;
        eprintln!("--resume: starting from the run's saved options ({})", path.display());
    }
    let args = A::from_arg_matches(&matches).map_err(|e| bad_input(e.to_string()))?;
    Ok((args, matches))
}

/// With `--resume`, the options the run in `--out` was started with (`config-<mode>.json`),
/// the options this command has no more left out; `None` without `--resume`, or where the
/// directory has no such file (said as a warning).
fn saved_run_options(command: &clap::Command, given: &ArgMatches) -> Result<Option<(Table, PathBuf)>, Failure> {
    if !matches!(given.try_get_one::<bool>("resume"), Ok(Some(true))) {
        return Ok(None);
    }
    let (Ok(Some(out)), Ok(Some(mut mode))) = (given.try_get_one::<PathBuf>("out"), given.try_get_raw("mode")) else {
        return Ok(None);
    };
    let mode = mode.next().map(|m| m.to_string_lossy().into_owned()).unwrap_or_default();
    let path = leanburn::runner::RunDir::existing(out, &mode).options_path();
    if !path.exists() {
        eprintln!(
            "warning: --resume: {} has no saved options ({}); the command line must repeat the run's own",
            out.display(),
            path.display()
        );
        return Ok(None);
    }
    let mut table = read_table(&path).map_err(|f| bad_input(format!("--resume: {}", f.message)))?;
    // Options this build no longer has are dropped rather than refused.
    table.retain(|key, _| {
        let name = key.replace('_', "-");
        !PER_INVOCATION.contains(&name.as_str()) && command.get_arguments().any(|a| a.get_long() == Some(name.as_str()))
    });
    Ok(Some((table, path)))
}

/// Refuses a resumed run whose command line or config file sets one of `fixed` to another
/// value than the run was started with.
fn check_fixed(
    command: &clap::Command,
    given: &ArgMatches,
    table: Option<&Map<String, Value>>,
    matches: &ArgMatches,
    saved: &Map<String, Value>,
    path: &Path,
    fixed: &[&str],
) -> Result<(), Failure> {
    for name in fixed {
        let Some(before) = saved.get(*name) else { continue };
        let Some(arg) = command.get_arguments().find(|a| a.get_long() == Some(*name)) else { continue };
        let id = arg.get_id().as_str();
        let set_now = matches!(given.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable))
            || table.is_some_and(|table| table.contains_key(*name) || table.contains_key(&name.replace('-', "_")));
        if !set_now {
            continue;
        }
        let now = value_of(matches, id);
        let before = match before {
            Value::Array(items) => items.iter().filter_map(scalar).collect::<Vec<_>>().join(","),
            other => scalar(other).unwrap_or_else(|| other.to_string()),
        };
        if !same_value(&before, &now) {
            return Err(bad_input(format!(
                "--resume: the run was started with --{name} {before} ({}), and --{name} {now} would change the \
                 model, the batches or the schedule its checkpoint holds; leave --{name} out to continue the run \
                 as it was, or start a new one (--overwrite, or another --out)",
                path.display()
            )));
        }
    }
    Ok(())
}

/// An option's value as the command line spells it (lists joined by commas); "false" or
/// "true" for a flag; empty where unset.
fn value_of(matches: &ArgMatches, id: &str) -> String {
    if let Ok(Some(flag)) = matches.try_get_one::<bool>(id) {
        return flag.to_string();
    }
    match matches.try_get_raw(id) {
        Ok(Some(raw)) => raw.map(|v| v.to_string_lossy().into_owned()).collect::<Vec<_>>().join(","),
        _ => String::new(),
    }
}

/// Equal as written, or as numbers (`1e-3` and `0.001`).
fn same_value(a: &str, b: &str) -> bool {
    a == b || matches!((a.parse::<f64>(), b.parse::<f64>()), (Ok(x), Ok(y)) if x == y)
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
        // Set on the command line, or in conflict with an option that is (a saved
        // `--device 0` under a given `--devices 0,0`): the command line wins.
        let explicit =
            |id: &str| matches!(given.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable));
        if explicit(arg.get_id().as_str())
            || command.get_arg_conflicts_with(arg).iter().any(|a| explicit(a.get_id().as_str()))
        {
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

/// The ids of the options `arg` cannot be given with, whichever of the two declares it.
fn in_conflict<'a>(command: &'a clap::Command, arg: &'a clap::Arg) -> impl Iterator<Item = &'a str> + 'a {
    command
        .get_arguments()
        .filter(move |other| {
            let declared = |a: &clap::Arg, b: &clap::Arg| {
                command.get_arg_conflicts_with(a).iter().any(|c| c.get_id() == b.get_id())
            };
            declared(arg, other) || declared(other, arg)
        })
        .map(|other| other.get_id().as_str())
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
        // A default that conflicts with an option that was set (`--device`'s 0 beside
        // `--devices`) would conflict when read back.
        let set = |id: &str| matches!(matches.value_source(id), Some(source) if source != ValueSource::DefaultValue);
        if matches.value_source(id) == Some(ValueSource::DefaultValue) && in_conflict(command, arg).any(set) {
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
