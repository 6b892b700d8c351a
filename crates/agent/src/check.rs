//! A declaration checked whole: every section with its own parser
//! (`decl`), then the composition rules (`compose`); every mistake one
//! line, nothing applied when there is one.
use std::path::Path;

use crate::compose;
use crate::decl::{self, ArgCheck, NodeDecl};

/// Reads and checks the declaration at `path` (a file, or a directory's
/// `*.toml`).
pub fn read(path: &Path, check: &ArgCheck) -> Result<NodeDecl, Vec<String>> {
    let mut texts = Vec::new();
    for f in decl::files_of(path)? {
        let t = std::fs::read_to_string(&f).map_err(|e| vec![format!("{}: {e}", f.display())])?;
        texts.push((f.display().to_string(), t));
    }
    parse_many(&texts, check)
}

/// Checks the files (name, text) as one declaration.
pub fn parse_many(files: &[(String, String)], check: &ArgCheck) -> Result<NodeDecl, Vec<String>> {
    let d = decl::sections(files, check)?;
    let errs = compose::check(&d);
    if errs.is_empty() {
        Ok(d)
    } else {
        Err(errs)
    }
}
