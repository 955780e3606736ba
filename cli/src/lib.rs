//! What the project's binaries share on the command line: `--log-format` and the log set-up
//! behind it ([`LogArgs`]), the `completions <shell>` subcommand of the binaries an admin types
//! ([`CompletionsArgs`]), and [`undocumented`], which each binary's tests use so that every flag
//! and subcommand says in `--help` what it does.
#![cfg_attr(test, allow(clippy::too_many_lines))] // test code is exempt (Cargo.toml's lints)

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

#[doc(hidden)]
pub use clap;

/// The test every binary carries, for its top-level `clap::Parser` type: the definition
/// passes clap's own checks, and every flag and subcommand has help text ([`undocumented`]).
#[macro_export]
macro_rules! command_line_tests {
    ($cli:ident) => {
        #[cfg(test)]
        mod command_line_tests {
            #[test]
            fn the_command_line_is_consistent_and_explained() {
                use $crate::clap::CommandFactory;
                super::$cli::command().debug_assert();
                assert_eq!(
                    $crate::undocumented(&super::$cli::command()),
                    Vec::<String>::new()
                );
            }
        }
    };
}

/// How log lines are written to stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Lines for people: time, level, target, message and fields (colours only on a terminal).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields` with `message`, and
    /// the current `span`), for log pipelines.
    Json,
}

/// `--log-format`, flattened into a binary's top-level arguments (global: it may also follow
/// a subcommand).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct LogArgs {
    /// Log format on stderr: text (for people) or json (one object per line, for log
    /// pipelines). Stdout keeps only each command's own output.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl LogArgs {
    /// Installs the process's log subscriber on stderr, filtered by the `EnvFilter` directives
    /// in env var `filter_env` (else `default`, e.g. `info`). A second call changes nothing.
    pub fn init(self, filter_env: &str, default: &str) {
        let filter =
            EnvFilter::try_from_env(filter_env).unwrap_or_else(|_| EnvFilter::new(default));
        let builder = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(filter);
        // Err only when a subscriber is already set: the first one stays.
        let _ = match self.log_format {
            LogFormat::Text => builder
                .with_ansi(std::io::stderr().is_terminal())
                .try_init(),
            LogFormat::Json => builder
                .json()
                .with_current_span(true)
                .with_span_list(false)
                .try_init(),
        };
    }
}

/// `completions <shell>`: prints the completion script of the binary for `shell`.
#[derive(clap::Args, Clone, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell (e.g. `source <(etcd-operator
    /// completions bash)`).
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

impl CompletionsArgs {
    /// Writes the script for `cmd` (the binary's whole command line) to stdout.
    pub fn print(&self, mut cmd: clap::Command) {
        let name = cmd.get_name().to_owned();
        clap_complete::generate(self.shell, &mut cmd, name, &mut std::io::stdout());
    }
}

/// Every argument and subcommand of `cmd`, its subcommands' included, that has no help text,
/// as `<command path> --<flag>`, `<command path> <VALUE>` or `<command path> <subcommand>`
/// (clap's own `--help` and `--version` aside). Empty when everything is explained.
pub fn undocumented(cmd: &clap::Command) -> Vec<String> {
    let mut out = Vec::new();
    walk(cmd, cmd.get_name(), &mut out);
    out
}

fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "help" | "version") || arg.get_help().is_some() {
            continue;
        }
        match arg.get_long() {
            Some(long) => out.push(format!("{path} --{long}")),
            None => out.push(format!("{path} <{}>", id.to_uppercase())),
        }
    }
    for sub in cmd.get_subcommands() {
        let sub_path = format!("{path} {}", sub.get_name());
        if sub.get_about().is_none() && sub.get_name() != "help" {
            out.push(sub_path.clone());
        }
        walk(sub, &sub_path, out);
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser, Subcommand};

    use super::*;

    /// A tool.
    #[derive(Parser, Debug)]
    #[command(name = "tool")]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
        /// Explained.
        #[arg(long)]
        explained: bool,
        #[arg(long)]
        bare: bool,
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Subcommand, Debug)]
    enum Cmd {
        /// Explained too.
        Go {
            target: String,
        },
        Stop,
        /// Prints completions.
        Completions(CompletionsArgs),
    }

    #[test]
    fn every_unexplained_flag_positional_and_subcommand_is_named() {
        Cli::command().debug_assert();
        assert_eq!(
            undocumented(&Cli::command()),
            ["tool --bare", "tool go <TARGET>", "tool stop"]
        );
    }

    #[test]
    fn the_log_format_is_global_and_text_by_default() {
        let cli = Cli::try_parse_from(["tool", "stop"]).unwrap();
        assert_eq!(cli.log.log_format, LogFormat::Text);
        let cli = Cli::try_parse_from(["tool", "stop", "--log-format", "json"]).unwrap();
        assert_eq!(cli.log.log_format, LogFormat::Json);
        let e = Cli::try_parse_from(["tool", "--log-format", "xml", "stop"]).unwrap_err();
        assert!(e.to_string().contains("'xml'"), "{e}");
    }

    #[test]
    fn completions_name_the_subcommands_and_flags() {
        let mut cmd = Cli::command();
        let mut out = Vec::new();
        clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "tool", &mut out);
        let script = String::from_utf8(out).unwrap();
        for word in ["completions", "--log-format", "--explained", "go"] {
            assert!(script.contains(word), "{word} missing from the bash script");
        }
        let Cmd::Completions(args) = Cli::try_parse_from(["tool", "completions", "zsh"])
            .unwrap()
            .command
        else {
            panic!("not parsed as completions")
        };
        assert_eq!(args.shell, clap_complete::Shell::Zsh);
    }
}
