# Every workflow of the project. Each recipe delegates to `cargo xtask` (xtask/src/main.rs), the
# one implementation, which also works on machines without `just`.

# Run the runtime with the example fleet (examples/fleet.toml) on ./vigil-data.
run *args:
    cargo xtask run {{args}}

# Every test: workspace tests, then the simulation suite.
test:
    cargo xtask test

# The simulator CLI, e.g. `just sim run --scenario smoke --seed 7`.
sim *args:
    cargo xtask sim {{args}}

# Sweep seeds 0..SEEDS of a scenario on all cores.
sweep scenario="smoke" seeds="100":
    cargo xtask sweep {{scenario}} {{seeds}}

# Re-run one seed with its whole trace printed.
replay seed scenario="smoke":
    cargo xtask replay {{seed}} {{scenario}}

# A benchmark against the real `vigil serve` (e.g. `just bench wakeups --clients 1,32`); writes
# its section of docs/benchmarks.md.
bench name="wakeups" *args:
    cargo xtask bench {{name}} {{args}}

# Median wall time of one smoke seed (release), run RUNS times.
bench-smoke runs="7" seed="1":
    cargo xtask bench-smoke {{runs}} {{seed}}

# Mutation score of the engine, shell, store and executor (needs cargo-mutants), e.g.
# `just mutants --sample 40 --budget-min 60`; `just mutants --report` prints the score so far.
mutants *args:
    cargo xtask mutants {{args}}
