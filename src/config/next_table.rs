//! `[[route]] next_table`: what the file alone can tell of a next-table route (the table it
//! names exists and is not the route's own; it has no next hops). Whether it would make a
//! packet cross tables twice depends on the other routes, and is the forwarding state's
//! check when Quiver starts (see `graph_nodes::forwarding`'s `next_table`).

use super::topology::{RouteSection, TableSection};
use super::values::ValueError;
use super::ConfigError;
use crate::forwarder::DEFAULT_TABLE;

/// The next table of `route[i]`, `r`, which is in `table` (`None`: the default table), among
/// the file's `tables`.
pub(super) fn check<'a>(
    i: usize,
    r: &'a RouteSection,
    table: Option<&str>,
    tables: &[TableSection],
) -> Result<Option<&'a str>, ConfigError> {
    let Some(next) = r.next_table.as_deref() else {
        return Ok(None);
    };
    let key = format!("route[{i}].next_table");
    let refused = |why: String| ConfigError::Value {
        key: key.clone(),
        source: ValueError::Refused(why),
    };
    if !r.via.is_empty() {
        return Err(refused(
            "a route has next hops (via) or a next table, not both".into(),
        ));
    }
    if next != DEFAULT_TABLE && !tables.iter().any(|t| t.name == next) {
        return Err(ConfigError::Value {
            key,
            source: ValueError::Unknown {
                what: "table",
                name: next.to_string(),
            },
        });
    }
    let own = table.unwrap_or(DEFAULT_TABLE);
    if next == own {
        return Err(refused(format!(
            "{next:?} is the route's own table: a next-table route names another"
        )));
    }
    Ok(Some(next))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const TABLES: &str = "[[port]]\nname = \"a\"\ntype = \"tap\"\n[[table]]\nname = \"red\"\n";

    /// The key and message `text`'s topology is refused with.
    fn refused(text: &str) -> (String, String) {
        match Config::parse(&format!("{TABLES}{text}")) {
            Err(crate::config::ConfigError::Value { key, source }) => (key, source.to_string()),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_next_table_route_names_another_table_that_exists_and_no_next_hop() {
        let c = Config::parse(&format!(
            "{TABLES}[[route]]\nprefix = \"0.0.0.0/0\"\ntable = \"red\"\nnext_table = \"default\"\n\
             [[route]]\nprefix = \"::/0\"\nnext_table = \"red\"\n"
        ))
        .unwrap();
        let t = c.topology().unwrap();
        assert_eq!(t.routes[0].next_table, Some("default"));
        assert_eq!(t.routes[1].next_table, Some("red"));
        assert_eq!(t.routes[1].table, None);
        let (k, m) =
            refused("[[route]]\nprefix = \"0.0.0.0/0\"\ntable = \"red\"\nnext_table = \"red\"\n");
        assert_eq!(k, "route[0].next_table");
        assert!(m.contains("the route's own table"), "{m}");
        let (k, m) = refused("[[route]]\nprefix = \"0.0.0.0/0\"\nnext_table = \"default\"\n");
        assert_eq!(k, "route[0].next_table");
        assert!(m.contains("own table"), "{m}");
        let (k, m) = refused("[[route]]\nprefix = \"0.0.0.0/0\"\nnext_table = \"green\"\n");
        assert_eq!(k, "route[0].next_table");
        assert!(m.contains("green"), "{m}");
        let (k, m) = refused(
            "[[route]]\nprefix = \"0.0.0.0/0\"\nnext_table = \"red\"\nvia = [\"10.0.0.2@a\"]\n",
        );
        assert_eq!(k, "route[0].next_table");
        assert!(m.contains("not both"), "{m}");
    }
}
