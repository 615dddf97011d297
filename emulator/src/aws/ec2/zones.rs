//! DescribeAvailabilityZones: the region's zones, each with a zone ID in AWS's form (`use1-az1`).

use super::filter;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::Params;
use crate::aws::xml::{Node, items, text};
use crate::config::Config;

/// The zone ID of the zone at `index` (configuration order) of `region`: AWS's region code and `az` with the
/// zone's number — stable as long as the zones' order is.
pub fn zone_id(region: &str, index: usize) -> String {
    format!("{}-az{}", region_code(region), index + 1)
}

/// `us-east-1` → `use1`, `ap-southeast-2` → `apse2`, as AWS abbreviates regions in zone IDs; a region not of
/// that form (`fakecloud`) keeps its letters and digits, at most 8.
fn region_code(region: &str) -> String {
    let parts: Vec<&str> = region.split('-').collect();
    match parts.as_slice() {
        [area, middle @ .., number] if !middle.is_empty() && number.chars().all(|c| c.is_ascii_digit()) => {
            let middle: String = middle
                .iter()
                .map(|w| match *w {
                    "northeast" => "ne".to_string(),
                    "northwest" => "nw".to_string(),
                    "southeast" => "se".to_string(),
                    "southwest" => "sw".to_string(),
                    w => w.chars().take(1).collect(),
                })
                .collect();
            format!("{area}{middle}{number}")
        }
        _ => region.chars().filter(char::is_ascii_alphanumeric).take(8).collect::<String>().to_ascii_lowercase(),
    }
}

pub fn describe(cfg: &Config, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &cfg.topology;
    let names = params.list("ZoneName")?;
    let ids = params.list("ZoneId")?;
    params.bool("AllAvailabilityZones")?;
    let filters = params.filters()?;
    filter::check(&filters, |n| matches!(n, "zone-name" | "zone-id" | "state" | "region-name" | "zone-type"))?;
    let zones: Vec<(&str, String)> =
        topo.zones.iter().enumerate().map(|(i, (name, _))| (name.as_str(), zone_id(&topo.region, i))).collect();
    for name in &names {
        if !zones.iter().any(|(z, _)| z == name) {
            return Err(AwsError::invalid_value(format!("Invalid availability zone: [{name}]")));
        }
    }
    for id in &ids {
        if !zones.iter().any(|(_, z)| z == id) {
            return Err(AwsError::invalid_value(format!("Invalid availability zone ID: [{id}]")));
        }
    }
    let chosen = zones.into_iter().filter(|(name, id)| {
        (names.is_empty() || names.iter().any(|n| n == name))
            && (ids.is_empty() || ids.iter().any(|i| i == id))
            && filters.iter().all(|f| {
                let value = match f.name.as_str() {
                    "zone-name" => *name,
                    "zone-id" => id.as_str(),
                    "state" => "available",
                    "region-name" => topo.region.as_str(),
                    _ => "availability-zone",
                };
                filter::any(&f.values, value)
            })
    });
    let zones = chosen.map(|(name, id)| {
        vec![
            text("zoneName", name),
            text("zoneState", "available"),
            text("regionName", topo.region.clone()),
            items("messageSet", []),
            text("zoneId", id),
            text("zoneType", "availability-zone"),
            text("optInStatus", "opt-in-not-required"),
            text("groupName", topo.region.clone()),
            text("networkBorderGroup", topo.region.clone()),
        ]
    });
    Ok(vec![items("availabilityZoneInfo", zones.collect::<Vec<_>>())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_ids_abbreviate_the_region_as_aws_does() {
        assert_eq!(zone_id("us-east-1", 0), "use1-az1");
        assert_eq!(zone_id("eu-central-1", 2), "euc1-az3");
        assert_eq!(zone_id("ap-southeast-2", 1), "apse2-az2");
        assert_eq!(zone_id("fakecloud-local", 0), "fakeclou-az1");
    }
}
