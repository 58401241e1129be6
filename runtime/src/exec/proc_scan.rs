//! Linux's `/proc`, read for the processes of one group: which are alive, and whether one
//! carries a run's marker. procfs is kernel memory; reading it never waits on a disk.

use std::path::Path;

/// A process of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub pid: u32,
    /// Exited, not yet reaped by its parent.
    pub zombie: bool,
}

/// A process, as `/proc/<pid>/stat` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub state: char,
    pub pgrp: u32,
}

/// Every process of the machine (those that vanish while being read are left out).
pub fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"));
            let (state, pgrp) = parse_stat(&stat.ok()?)?;
            Some(Process { pid, state, pgrp })
        })
        .collect()
}

/// The processes whose process group is `pgid`.
pub fn group_members(pgid: u32) -> Vec<Member> {
    processes()
        .into_iter()
        .filter(|p| p.pgrp == pgid)
        .map(|p| Member {
            pid: p.pid,
            zombie: p.state == 'Z',
        })
        .collect()
}

/// The state and process group of a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Whether process `pid`'s environment holds the exact entry `entry` (`NAME=value`).
pub fn environ_has(pid: u32, entry: &str) -> bool {
    let path = Path::new("/proc").join(pid.to_string()).join("environ");
    std::fs::read(path)
        .map(|environ| environ.split(|&b| b == 0).any(|e| e == entry.as_bytes()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        assert_eq!(
            parse_stat("4242 (sleep) S 4241 4240 4240 0 -1 4194304"),
            Some(('S', 4240))
        );
        // A name with spaces and a parenthesis of its own.
        assert_eq!(
            parse_stat("77 (a b) c)) Z 1 76 76 0"),
            Some(('Z', 76))
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn our_own_process_is_a_member_of_our_group_with_our_environment() {
        // SAFETY: getpgrp has no preconditions.
        let pgrp = u32::try_from(unsafe { libc::getpgrp() }).unwrap();
        let me = std::process::id();
        assert!(group_members(pgrp).iter().any(|m| m.pid == me && !m.zombie));
        let path = std::env::var("PATH").unwrap_or_default();
        assert!(environ_has(me, &format!("PATH={path}")) || path.is_empty());
        assert!(!environ_has(me, "VIGIL_NO_SUCH_VARIABLE=1"));
    }
}
