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
    let d = decl::sections(files, check).map_err(one_line_each)?;
    let errs = compose::check(&d);
    if errs.is_empty() {
        Ok(d)
    } else {
        Err(one_line_each(errs))
    }
}

/// Each mistake stays one line, whatever text of the file it quotes: a
/// control character (a newline in a TOML string) is written escaped.
fn one_line_each(errs: Vec<String>) -> Vec<String> {
    errs.into_iter()
        .map(|e| {
            e.chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_default().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the fuzzer found: a name with a newline in it made a
    /// composition error two lines long. Names are refused now, and any
    /// line that quotes the file stays one line.
    #[test]
    fn every_mistake_is_one_line_even_when_it_quotes_a_newline() {
        let any: &ArgCheck = &|_, _| Ok(());
        let text = "[[function]]\nname = \"ech\\nL\"\niface = \"eth5\"\nnetns = \"fn\"\n";
        let errs = parse_many(&[("node.toml".into(), text.into())], any).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("letters, digits and -_. only"), "{errs:?}");
        assert!(!errs[0].contains('\n'), "{errs:?}");
        let port = "[router]\nports = [\"a\\nb\"]\n";
        let errs = parse_many(&[("node.toml".into(), port.into())], any).unwrap_err();
        assert!(errs.iter().all(|e| !e.contains('\n')), "{errs:?}");
        assert!(errs[0].contains("is not an interface name"), "{errs:?}");
        assert_eq!(one_line_each(vec!["a\nb\tc".into()]), ["a\\nb\\tc"]);
    }
}
