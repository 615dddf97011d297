//! A user's own cloud config for cloud-provider-aws (`stack up --ccm aws --aws-cloud-config FILE`, issue #50),
//! checked before the CCM starts: what the CCM would refuse, or could not use on this cloud, is refused here,
//! every problem at once, each saying what to do. The CCM reads the file with gcfg (`config.CloudConfig`:
//! sections and names match whatever their case, and a name it does not know fails its start) and checks its
//! overrides with `ValidateOverrides` (config.go L161: each needs `Service`, `Region`, `URL` and `SigningRegion`).

use std::collections::BTreeMap;

use ini::{Ini, ParseOption};

use crate::composition::AWS_SERVICES;

/// `[Global]`'s names, as `config.CloudConfig` has them (lowercase: gcfg matches them whatever their case).
const GLOBAL: [&str; 17] = [
    "zone",
    "region",
    "vpc",
    "subnetid",
    "routetableid",
    "rolearn",
    "sourcearn",
    "kubernetesclustertag",
    "kubernetesclusterid",
    "disablesecuritygroupingress",
    "elbsecuritygroup",
    "nodeipfamilies",
    "clusterserviceloadbalancerhealthprobemode",
    "clusterservicesharedloadbalancerhealthprobeport",
    "clusterservicesharedloadbalancerhealthprobepath",
    "supportedtopologyinstancetypepattern",
    "nlbsecuritygroupmode",
];
/// A `[ServiceOverride "N"]`'s names.
const OVERRIDE: [&str; 6] = ["service", "region", "url", "signingregion", "signingmethod", "signingname"];

/// This cloud, as a cloud config for it must name it.
#[derive(Debug, Clone)]
pub struct Cloud<'a> {
    pub region: &'a str,
    pub vpc: &'a str,
    /// Each subnet's ID and zone.
    pub subnets: &'a [(String, String)],
    /// The cluster ID the stack tags the network and instances for.
    pub cluster_id: &'a str,
    /// Where the AWS face answers.
    pub url: &'a str,
}

/// A section's values by lowercase name.
type Values = BTreeMap<String, String>;

/// The problems with cloud config `text`, each saying what to do; none if the CCM can use it. Without `cloud`,
/// only what holds on any cloud is checked (before the stack starts anything); with it, that the file names this
/// cloud too.
pub fn problems(text: &str, cloud: Option<&Cloud<'_>>) -> Vec<String> {
    let parse = ParseOption { enabled_quote: true, enabled_escape: true, ..Default::default() };
    let file = match Ini::load_from_str_opt(text, parse) {
        Ok(file) => file,
        Err(e) => return vec![format!("it is not a cloud config (gcfg's INI form): {e}")],
    };
    let mut found = Vec::new();
    let mut global = Values::new();
    let mut overrides: Vec<(String, Values)> = Vec::new();
    for (section, values) in file.iter() {
        let lowered: Values = values.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string())).collect();
        let (known, into): (&[&str], &mut Values) = match section.map(str::trim) {
            None if lowered.is_empty() => continue,
            Some(s) if s.eq_ignore_ascii_case("global") => (&GLOBAL, &mut global),
            Some(s) if s.to_ascii_lowercase().starts_with("serviceoverride ") => {
                overrides.push((s["serviceoverride ".len()..].trim().trim_matches('"').to_string(), Values::new()));
                let last = overrides.len() - 1;
                (&OVERRIDE, &mut overrides[last].1)
            }
            other => {
                let name = other.map_or("(before any section)".to_string(), |s| format!("[{s}]"));
                found.push(format!(
                    "{name}: cloud-provider-aws knows only [Global] and [ServiceOverride \"N\"]; remove it"
                ));
                continue;
            }
        };
        for (name, value) in lowered {
            if known.contains(&name.as_str()) {
                into.insert(name, value);
            } else {
                let section = section.unwrap_or_default();
                found.push(format!(
                    "[{section}] {name}: not a name cloud-provider-aws knows (its start would fail); remove it"
                ));
            }
        }
    }
    check_global(&global, cloud, &mut found);
    check_overrides(&overrides, cloud, &mut found);
    found
}

fn check_global(global: &Values, cloud: Option<&Cloud<'_>>, found: &mut Vec<String>) {
    let get = |name: &str| global.get(name).map(String::as_str).filter(|v| !v.is_empty());
    if get("rolearn").is_some() {
        found.push(
            "RoleARN: the CCM would assume that role through STS, which this cloud does not answer; remove it".into(),
        );
    }
    for (name, shown) in [("vpc", "VPC"), ("subnetid", "SubnetID"), ("kubernetesclusterid", "KubernetesClusterID")] {
        if get(name).is_none() {
            let example = cloud.map_or(String::new(), |c| match name {
                "vpc" => format!(" = {}", c.vpc),
                "subnetid" => format!(" = {}", c.subnets.first().map_or("", |s| s.0.as_str())),
                _ => format!(" = {}", c.cluster_id),
            });
            found.push(format!(
                "[Global] has no {shown}: without VPC, SubnetID and KubernetesClusterID the CCM asks the instance \
                 metadata service, which this cloud has not; set {shown}{example}"
            ));
        }
    }
    let Some(cloud) = cloud else { return };
    let must_be = |name: &str, shown: &str, want: &str, why: &str, found: &mut Vec<String>| {
        if let Some(v) = get(name).filter(|v| *v != want) {
            found.push(format!("[Global] {shown} = {v}: {why}; set {shown} = {want}"));
        }
    };
    must_be("region", "Region", cloud.region, &format!("this cloud's region is {}", cloud.region), found);
    must_be("vpc", "VPC", cloud.vpc, &format!("this cloud's VPC is {}", cloud.vpc), found);
    must_be(
        "kubernetesclusterid",
        "KubernetesClusterID",
        cloud.cluster_id,
        &format!(
            "the stack tags the subnets, route table and instances for {}; the CCM would find none",
            cloud.cluster_id
        ),
        found,
    );
    let subnets: Vec<&str> = cloud.subnets.iter().map(|s| s.0.as_str()).collect();
    if let Some(v) = get("subnetid").filter(|v| !subnets.contains(v)) {
        found.push(format!("[Global] SubnetID = {v}: no such subnet here; set one of {}", subnets.join(", ")));
    }
    let zones: Vec<&str> = cloud.subnets.iter().map(|s| s.1.as_str()).collect();
    if let Some(v) = get("zone").filter(|v| !zones.contains(v)) {
        found.push(format!("[Global] Zone = {v}: no such zone here; set one of {}, or leave it out", zones.join(", ")));
    }
}

fn check_overrides(overrides: &[(String, Values)], cloud: Option<&Cloud<'_>>, found: &mut Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    for (n, values) in overrides {
        let get = |name: &str| values.get(name).map(String::as_str).filter(|v| !v.is_empty());
        // What `ValidateOverrides` refuses, in its words.
        for (name, shown) in
            [("service", "Service"), ("region", "Region"), ("url", "URL"), ("signingregion", "SigningRegion")]
        {
            if get(name).is_none() {
                found.push(format!("[ServiceOverride \"{n}\"] has no {shown}: cloud-provider-aws refuses an override without it; set it"));
            }
        }
        let Some(service) = get("service") else { continue };
        if !seen.insert((service, get("region"))) {
            found.push(format!(
                "[ServiceOverride \"{n}\"] is a second override for {service} in {}: cloud-provider-aws refuses \
                 duplicates; remove one",
                get("region").unwrap_or("(no region)")
            ));
        }
        let Some((_, signing)) = AWS_SERVICES.iter().find(|(s, _)| *s == service) else {
            let names: Vec<&str> = AWS_SERVICES.iter().map(|s| s.0).collect();
            found.push(format!(
                "[ServiceOverride \"{n}\"] Service = {service}: the face answers {}; the CCM calls no other",
                names.join(", ")
            ));
            continue;
        };
        if get("signingname") != Some(*signing) {
            found.push(format!(
                "[ServiceOverride \"{n}\"] SigningName = {}: an override replaces the SDK's signing name, and the face \
                 checks {service}'s signatures for {signing}; set SigningName = {signing}",
                get("signingname").unwrap_or("(none)")
            ));
        }
        let Some(cloud) = cloud else { continue };
        for (name, shown, want) in [
            ("region", "Region", cloud.region),
            ("signingregion", "SigningRegion", cloud.region),
            ("url", "URL", cloud.url),
        ] {
            if let Some(v) = get(name).filter(|v| *v != want) {
                found.push(format!(
                    "[ServiceOverride \"{n}\"] {shown} = {v}: this cloud's is {want}; set {shown} = {want}"
                ));
            }
        }
    }
    for (service, _) in AWS_SERVICES {
        if !overrides.iter().any(|(_, v)| v.get("service").map(String::as_str) == Some(service)) {
            let at = cloud.map_or("the emulator's URL".to_string(), |c| c.url.to_string());
            found.push(format!(
                "no [ServiceOverride] for Service = {service}: the CCM would call AWS's own endpoint; add one with \
                 URL = {at}"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::composition::AwsCloudConfig;

    fn subnets() -> Vec<(String, String)> {
        vec![("subnet-a".into(), "local-1a".into()), ("subnet-b".into(), "local-1b".into())]
    }

    /// A change to a config's text.
    type Change = &'static dyn Fn(String) -> String;

    /// The stack's own config for this cloud.
    fn the_stacks() -> String {
        let url = "http://127.0.0.1:8787";
        AwsCloudConfig { region: "local-1", zone: "local-1a", vpc: "vpc-1", subnet: "subnet-a", cluster_id: "fc", url }
            .text()
    }

    #[test]
    fn the_stacks_own_config_and_each_mistake_a_user_makes() {
        let subnets = subnets();
        let cloud = Cloud {
            region: "local-1",
            vpc: "vpc-1",
            subnets: &subnets,
            cluster_id: "fc",
            url: "http://127.0.0.1:8787",
        };
        assert_eq!(problems(&the_stacks(), Some(&cloud)), Vec::<String>::new());
        // gcfg's names match whatever their case; a user's extra option is kept.
        let mixed = the_stacks().replace("SubnetID", "subnetid") + "\n[global]\nDisableSecurityGroupIngress = true\n";
        assert_eq!(problems(&mixed, Some(&cloud)), Vec::<String>::new());

        // (the change, what the one problem says, whether it is found without the cloud too)
        let cases: [(Change, &str, bool); 13] = [
            (&|t| t + "SigningName\n", "not a cloud config", true),
            (&|t| t + "\n[Extra]\nx = 1\n", "[Extra]: cloud-provider-aws knows only", true),
            (&|t| t.replace("Zone =", "Zoen ="), "zoen: not a name cloud-provider-aws knows", true),
            (
                &|t| t.replace("[Global]\n", "[Global]\nRoleARN = arn:aws:iam::1:role/x\n"),
                "RoleARN: the CCM would",
                true,
            ),
            (&|t| t.replace("VPC = \"vpc-1\"\n", ""), "[Global] has no VPC", true),
            (&|t| t.replacen("SigningRegion = \"local-1\"\n", "", 1), "has no SigningRegion", true),
            (&|t| t.replacen("SigningName = \"ec2\"\n", "", 1), "SigningName = (none)", true),
            (&|t| t.replace("Service = \"EC2\"", "Service = \"EKS\""), "Service = EKS: the face answers", true),
            (&|t| t.replace("Elastic Load Balancing v2", "EC2"), "a second override for EC2 in local-1", true),
            (
                &|t| t.replacen("Region = \"local-1\"", "Region = \"us-east-1\"", 1),
                "[Global] Region = us-east-1",
                false,
            ),
            (&|t| t.replace("VPC = \"vpc-1\"", "VPC = \"vpc-2\""), "this cloud's VPC is vpc-1", false),
            (&|t| t.replace("SubnetID = \"subnet-a\"", "SubnetID = \"subnet-z\""), "no such subnet here", false),
            (
                &|t| t.replace("KubernetesClusterID = \"fc\"", "KubernetesClusterID = \"prod\""),
                "the CCM would find none",
                false,
            ),
        ];
        for (change, says, statically) in cases {
            let text = change(the_stacks());
            let found = problems(&text, Some(&cloud));
            assert!(found.iter().any(|p| p.contains(says)), "{says:?} not among {found:#?} for\n{text}");
            let before = problems(&text, None);
            assert_eq!(before.iter().any(|p| p.contains(says)), statically, "{says:?}: {before:#?}");
        }
        // An override that names another URL, and a service with none.
        let elsewhere = the_stacks().replacen("http://127.0.0.1:8787", "https://ec2.us-east-1.amazonaws.com", 1);
        let found = problems(&elsewhere, Some(&cloud));
        assert!(
            found.iter().any(|p| p.contains("URL = https://ec2.us-east-1.amazonaws.com: this cloud's is")),
            "{found:#?}"
        );
        let no_elb = the_stacks().replace("Service = \"Elastic Load Balancing\"\n", "Service = \"EC2\"\n");
        let found = problems(&no_elb, None);
        assert!(
            found.iter().any(|p| p.contains("no [ServiceOverride] for Service = Elastic Load Balancing:")),
            "{found:#?}"
        );
    }
}
