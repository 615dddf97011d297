//! The controllers, one module each, and the `--controllers` flag's names (upstream's canonical names and
//! aliases, `*` for all and `-name` to disable one).

pub mod node;
pub mod node_lifecycle;
pub mod route;
pub mod service;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerName {
    CloudNode,
    CloudNodeLifecycle,
    Service,
    Route,
}

impl ControllerName {
    pub const ALL: [Self; 4] = [Self::CloudNode, Self::CloudNodeLifecycle, Self::Service, Self::Route];

    pub fn canonical(self) -> &'static str {
        match self {
            Self::CloudNode => "cloud-node-controller",
            Self::CloudNodeLifecycle => "cloud-node-lifecycle-controller",
            Self::Service => "service-lb-controller",
            Self::Route => "node-route-controller",
        }
    }

    /// The alias; also the `name` upstream's `running_managed_controllers` metric uses.
    pub fn alias(self) -> &'static str {
        match self {
            Self::CloudNode => "cloud-node",
            Self::CloudNodeLifecycle => "cloud-node-lifecycle",
            Self::Service => "service",
            Self::Route => "route",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.canonical() == s || c.alias() == s)
    }
}

/// The controllers `--controllers` enables, in a stable order.
pub fn enabled(flags: &[String]) -> Result<Vec<ControllerName>, String> {
    let mut all = false;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for f in flags.iter().map(|f| f.trim()).filter(|f| !f.is_empty()) {
        if f == "*" {
            all = true;
            continue;
        }
        let (list, name) = match f.strip_prefix('-') {
            Some(n) => (&mut off, n),
            None => (&mut on, f),
        };
        list.push(
            ControllerName::parse(name).ok_or_else(|| format!("{name:?} is not in the list of known controllers"))?,
        );
    }
    Ok(ControllerName::ALL.into_iter().filter(|c| (all || on.contains(c)) && !off.contains(c)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_flag_takes_names_aliases_star_and_minus() {
        let v = |s: &[&str]| enabled(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["*"]).unwrap().len(), 4);
        assert_eq!(
            v(&["*", "-route", "-service"]).unwrap(),
            [ControllerName::CloudNode, ControllerName::CloudNodeLifecycle]
        );
        assert_eq!(
            v(&["cloud-node-controller", "cloud-node-lifecycle"]).unwrap(),
            [ControllerName::CloudNode, ControllerName::CloudNodeLifecycle]
        );
        assert!(v(&["nodes"]).unwrap_err().contains("\"nodes\" is not in the list of known controllers"));
    }
}
