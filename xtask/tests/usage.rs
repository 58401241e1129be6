//! `cargo xtask` as a user meets it: the command list on no arguments, `help`, or a typo.

use std::process::{Command, Output};

/// Exit status for a command xtask does not know (as for any usage error).
const EXIT_USAGE: i32 = 2;

/// The commands every list must name.
const COMMANDS: &[&str] = &[
    "run", "vigil", "test", "readme-check", "sim", "sweep", "replay", "bench-smoke", "help",
];

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("xtask runs")
}

fn assert_lists_commands(text: &str) {
    for name in COMMANDS {
        assert!(
            text.lines().any(|line| line.trim_start().starts_with(&format!("{name} "))),
            "{name} missing from:\n{text}"
        );
    }
}

#[test]
fn no_arguments_and_help_list_commands_and_exit_zero() {
    for args in [&[][..], &["help"][..]] {
        let output = xtask(args);
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        assert_lists_commands(&String::from_utf8_lossy(&output.stdout));
    }
}

#[test]
fn unknown_command_lists_commands_and_exits_two() {
    let output = xtask(&["frobnicate"]);
    assert_eq!(output.status.code(), Some(EXIT_USAGE));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown command \"frobnicate\""), "{stderr}");
    assert_lists_commands(&stderr);
}
