//! TEMPORARY stand-ins for `table.rs` and `html.rs` (written in parallel by another engineer),
//! so that `vigil-sim fleet` compiles and prints something until they merge. Dropped at merge,
//! with the two `stand_in` lines of mod.rs.

pub mod table {
    use crate::fleet_report::FleetReport;

    /// A plain summary: per agent, the median per day of a few figures; then the expectations.
    pub fn render(report: &FleetReport) -> String {
        let median = |days: &crate::fleet_report::DaySpreads, key: &str| -> String {
            days.get(key).map_or("-".into(), |v| {
                v.iter()
                    .map(|s| format!("{:.1}", s.median))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        };
        let mut out = format!(
            "fleet {}: {} days, seeds {:?}, faults {}\n",
            report.fleet_file, report.days, report.seeds, report.faults
        );
        for key in ["wakeups", "runs", "llm_invocations", "cost_usd", "cap_hits"] {
            out.push_str(&format!(
                "  fleet {key} per day (median): {}\n",
                median(&report.fleet, key)
            ));
        }
        for agent in &report.agents {
            out.push_str(&format!(
                "  {}: wakeups {} | invocations {} | cap hits {}\n",
                agent.agent,
                median(&agent.days, "wakeups"),
                median(&agent.days, "llm_invocations"),
                median(&agent.days, "cap_hits")
            ));
        }
        for e in &report.expectations {
            out.push_str(&format!(
                "  expect {} ({}): {}\n",
                e.expectation,
                e.scope,
                if e.passed { "pass" } else { "FAIL" }
            ));
        }
        out.push_str(&format!(
            "  invariant violations: {}\n",
            report.invariant_violations.len()
        ));
        out
    }
}

pub mod html {
    use crate::fleet_report::FleetReport;

    /// The JSON report in a page, until the real page merges.
    pub fn render(report: &FleetReport) -> String {
        let json = serde_json::to_string_pretty(report).expect("reports serialize");
        let escaped = json.replace('&', "&amp;").replace('<', "&lt;");
        format!("<!doctype html><meta charset=\"utf-8\"><title>vigil-sim fleet</title><pre>{escaped}</pre>\n")
    }
}
