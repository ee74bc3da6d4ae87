//! Runs `gpuhub sim …` until the `gpuhub` binary calls it:
//! `cargo run --release -p gpuhub-sim --example sim -- fgd --nodes … --pods …`.

use clap::Parser;

/// gpuhub scheduler simulator.
#[derive(Debug, Parser)]
#[command(name = "sim")]
struct Cli {
    #[command(subcommand)]
    cmd: gpuhub_sim::SimCommand,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = gpuhub_sim::run(cli.cmd) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}
