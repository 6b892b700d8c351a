//! Man pages and shell completions, generated from the CLI definition (so
//! they cannot disagree with `--help`); `scripts/setup.sh` installs them.
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::Cli;

/// Writes `peregrine.1` and one page per subcommand (`peregrine-faas-load.1`)
/// into `dir`.
pub fn man(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = Cli::command();
    cmd.build();
    write_pages(&cmd, "peregrine", dir)
}

fn write_pages(cmd: &clap::Command, name: &str, dir: &Path) -> Result<()> {
    let page = cmd.clone().name(name.to_string());
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir)?;
    }
    Ok(())
}

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) {
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "peregrine",
        &mut std::io::stdout(),
    );
}
