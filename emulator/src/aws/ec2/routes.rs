//! The cloud's route tables as EC2's: DescribeRouteTables, CreateRoute and DeleteRoute, on the native route
//! tables (`store::routes`): a route made here is in `GET /v1/route-tables/{id}/routes`, and the other way round.
//!
//! What EC2 shows beside the native routes, as an AWS user's VPC has it: every table's `local` route for the
//! VPC's CIDR; and the main table, which the zones' subnets use unless associated with another table
//! (AssociateRouteTable), associated with each of them and holding the internet gateway's `0.0.0.0/0` route, so
//! their subnets are public (load balancers get public addresses). A table made with CreateRouteTable has no
//! such route: a subnet associated with it is private, as cloud-provider-aws judges subnets (`isSubnetPublic`,
//! aws.go L1882: an `igw-` route in the subnet's table). That is all an association changes: the cloud's data
//! plane routes every zone alike. A route is named by its table and destination, as EC2 names it.

use std::collections::BTreeMap;

use fakecloud_api::{CreateRouteRequest, Route, RouteState, RouteTable, codes};
use ipnet::IpNet;
use store::routes::Association;

use super::{filter, network, tag_rules};
use crate::aws::credentials::Keys;
use crate::aws::error::{AwsError, Result};
use crate::aws::query::{Filter, Params};
use crate::aws::xml::{Node, el, items, text};
use crate::config::Topology;
use crate::http::AppState;
use crate::store;

/// The EC2 ID of the native route table `native`: its own ID when it has EC2's form (`rtb-` and 17 hex digits,
/// as the native API makes them), else one derived from it (the main table's `rtb-main`), the same at every start.
pub fn table_id(topo: &Topology, native: &str) -> String {
    if ec2_form(native) { native.to_string() } else { network::id("rtb", &[&topo.region, native]) }
}

/// The native ID of the route table whose EC2 ID is `id`: the main table's is derived from its own, every other
/// table's is its own (whether it exists is the store's to say).
pub fn native_id<'i>(topo: &Topology, id: &'i str) -> &'i str {
    if is_main(topo, id) { store::routes::MAIN_ID } else { id }
}

/// Whether `id` is the main table's EC2 ID (its native ID, `rtb-main`, is none).
fn is_main(topo: &Topology, id: &str) -> bool {
    id == table_id(topo, store::routes::MAIN_ID)
}

/// Whether a route table's ID has EC2's form (`rtb-` and 17 hex digits).
fn ec2_form(id: &str) -> bool {
    id.strip_prefix("rtb-")
        .is_some_and(|h| h.len() == 17 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// The native table whose EC2 ID is `id`, from the tables `tables`.
pub fn native_table<'t>(topo: &Topology, tables: &'t [RouteTable], id: &str) -> Result<&'t RouteTable> {
    check_id(id)?;
    tables.iter().find(|t| table_id(topo, &t.id) == id).ok_or_else(|| not_found(id))
}

fn check_id(id: &str) -> Result<()> {
    if id.starts_with("rtb-") && id.len() <= 64 {
        return Ok(());
    }
    let shown: String = id.chars().take(64).collect();
    Err(AwsError::client("InvalidRouteTableId.Malformed", format!("Invalid id: \"{shown}\" (expecting \"rtb-...\")")))
}

fn not_found(id: &str) -> AwsError {
    AwsError::client("InvalidRouteTableID.NotFound", format!("The routeTable ID '{id}' does not exist"))
}

/// The internet gateway of the VPC.
fn igw_id(topo: &Topology) -> String {
    network::id("igw", &[&topo.region, &network::vpc_id(topo)])
}

/// A route as EC2 shows it.
struct Ec2Route {
    destination: IpNet,
    /// `local`, or the internet gateway.
    gateway: Option<String>,
    instance: Option<String>,
    active: bool,
    /// Made with the table (the local route), or after (`CreateRoute`).
    origin: &'static str,
}

/// A table as EC2 shows it.
struct Ec2Table {
    id: String,
    main: bool,
    /// (association ID, subnet ID or `None` for the main association).
    associations: Vec<(String, Option<String>)>,
    routes: Vec<Ec2Route>,
    tags: BTreeMap<String, String>,
}

/// The routes EC2 shows that are not native routes: the local route, and on the main table the internet
/// gateway's default route.
fn implicit_routes(topo: &Topology, main: bool) -> Vec<Ec2Route> {
    let local = Ec2Route {
        destination: IpNet::V4(topo.vpc),
        gateway: Some("local".into()),
        instance: None,
        active: true,
        origin: "CreateRouteTable",
    };
    let internet = main.then(|| Ec2Route {
        destination: IpNet::V4(ipnet::Ipv4Net::default()),
        gateway: Some(igw_id(topo)),
        instance: None,
        active: true,
        origin: "CreateRoute",
    });
    std::iter::once(local).chain(internet).collect()
}

/// The ID of the main table's association with `subnet` (`None`: its main association), the same at every
/// start: these are the cloud's own, not the store's.
fn main_association(topo: &Topology, table: &str, subnet: Option<&str>) -> String {
    network::id("rtbassoc", &[&topo.region, table, subnet.unwrap_or("main")])
}

/// Table `t` as EC2 shows it; `associations` are the store's (every table's).
fn ec2_table(
    topo: &Topology,
    t: &RouteTable,
    routes: &[Route],
    associations: &[Association],
    tags: Option<&BTreeMap<String, String>>,
) -> Ec2Table {
    let id = table_id(topo, &t.id);
    let stored = associations
        .iter()
        .filter(|a| a.route_table_id == t.id)
        .map(|a| (a.id.clone(), Some(network::subnet_id(topo, &a.zone))));
    // The main table's own association, and each zone's subnet no association names.
    let implicit = t.main.then(|| {
        let unnamed = topo.zones.iter().filter(|(z, _)| !associations.iter().any(|a| &a.zone == z));
        std::iter::once((main_association(topo, &id, None), None)).chain(unnamed.map(|(z, _)| {
            let subnet = network::subnet_id(topo, z);
            (main_association(topo, &id, Some(&subnet)), Some(subnet))
        }))
    });
    let associations = implicit.into_iter().flatten().chain(stored).collect();
    let native = routes.iter().filter(|r| r.route_table_id == t.id).filter_map(|r| {
        Some(Ec2Route {
            // Stored canonical by the store; one that is not cannot be shown as a network.
            destination: r.destination.parse().ok()?,
            gateway: None,
            instance: Some(r.target_instance.clone()),
            active: r.state == RouteState::Active,
            origin: "CreateRoute",
        })
    });
    Ec2Table {
        id,
        main: t.main,
        associations,
        routes: implicit_routes(topo, t.main).into_iter().chain(native).collect(),
        tags: tags.cloned().unwrap_or_default(),
    }
}

/// The network interface of an instance, as a route through it names it.
fn eni_id(instance: &str) -> String {
    network::id("eni", &[instance])
}

fn passes(f: &Filter, t: &Ec2Table, vpc: &str, owner: &str) -> bool {
    let one = |v: &str| filter::any(&f.values, v);
    let route = |pick: &dyn Fn(&Ec2Route) -> Option<String>| t.routes.iter().any(|r| pick(r).is_some_and(|v| one(&v)));
    match f.name.as_str() {
        "route-table-id" | "association.route-table-id" => one(&t.id),
        "vpc-id" => one(vpc),
        "owner-id" => one(owner),
        "association.main" => one(if t.main { "true" } else { "false" }),
        "association.subnet-id" => t.associations.iter().any(|(_, s)| s.as_deref().is_some_and(one)),
        "association.route-table-association-id" => t.associations.iter().any(|(a, _)| one(a)),
        "route.destination-cidr-block" => route(&|r| r.destination.addr().is_ipv4().then(|| r.destination.to_string())),
        "route.destination-ipv6-cidr-block" => {
            route(&|r| r.destination.addr().is_ipv6().then(|| r.destination.to_string()))
        }
        "route.instance-id" => route(&|r| r.instance.clone()),
        "route.gateway-id" => route(&|r| r.gateway.clone()),
        "route.state" => route(&|r| Some(if r.active { "active" } else { "blackhole" }.to_string())),
        "route.origin" => route(&|r| Some(r.origin.to_string())),
        _ => filter::tags_pass(f, &t.tags),
    }
}

pub async fn describe(st: &AppState, keys: &Keys, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let ids = params.list("RouteTableId")?;
    let filters = params.filters()?;
    let max_results = params.int("MaxResults", 5, 100)?;
    let token = params.take("NextToken");
    for id in &ids {
        check_id(id)?;
    }
    filter::check(&filters, |n| {
        matches!(
            n,
            "route-table-id"
                | "vpc-id"
                | "owner-id"
                | "association.main"
                | "association.subnet-id"
                | "association.route-table-id"
                | "association.route-table-association-id"
                | "route.destination-cidr-block"
                | "route.destination-ipv6-cidr-block"
                | "route.instance-id"
                | "route.gateway-id"
                | "route.state"
                | "route.origin"
        ) || filter::is_tag(n)
    })?;
    // The token is how many tables the pages before have passed over.
    let skip: usize = Params::next_token(token.as_deref())?;
    let (tables, associations) = store::routes::tables_and_associations(&st.db).await?;
    let routes = store::routes::list_all(&st.db).await?;
    let tags = store::tags::others(&st.db).await?;
    let all: Vec<Ec2Table> =
        tables.iter().map(|t| ec2_table(topo, t, &routes, &associations, tags.get(&t.id))).collect();
    if let Some(missing) = ids.iter().find(|id| !all.iter().any(|t| &t.id == *id)) {
        return Err(not_found(missing));
    }
    let vpc = network::vpc_id(topo);
    let mut chosen = all
        .iter()
        .filter(|t| {
            (ids.is_empty() || ids.contains(&t.id)) && filters.iter().all(|f| passes(f, t, &vpc, &keys.account_id))
        })
        .skip(skip);
    let page: Vec<&Ec2Table> = match max_results {
        Some(n) => chosen.by_ref().take(n as usize).collect(),
        None => chosen.by_ref().collect(),
    };
    let mut answer =
        vec![items("routeTableSet", page.iter().map(|t| table(t, &vpc, &keys.account_id)).collect::<Vec<_>>())];
    if chosen.next().is_some() {
        answer.push(text("nextToken", (skip + page.len()).to_string()));
    }
    Ok(answer)
}

fn table(t: &Ec2Table, vpc: &str, owner: &str) -> Vec<Node> {
    let associations = t.associations.iter().map(|(assoc, subnet)| {
        let mut fields = vec![
            text("routeTableAssociationId", assoc.clone()),
            text("routeTableId", t.id.clone()),
            text("main", if subnet.is_none() { "true" } else { "false" }),
            el("associationState", vec![text("state", "associated")]),
        ];
        if let Some(s) = subnet {
            fields.insert(2, text("subnetId", s.clone()));
        }
        fields
    });
    let routes = t.routes.iter().map(|r| {
        let destination = match r.destination {
            IpNet::V4(_) => text("destinationCidrBlock", r.destination.to_string()),
            IpNet::V6(_) => text("destinationIpv6CidrBlock", r.destination.to_string()),
        };
        let mut fields = vec![destination];
        if let Some(g) = &r.gateway {
            fields.push(text("gatewayId", g.clone()));
        }
        if let Some(i) = &r.instance {
            fields.push(text("instanceId", i.clone()));
            fields.push(text("instanceOwnerId", owner));
            fields.push(text("networkInterfaceId", eni_id(i)));
        }
        fields.push(text("state", if r.active { "active" } else { "blackhole" }));
        fields.push(text("origin", r.origin));
        fields
    });
    vec![
        text("routeTableId", t.id.clone()),
        text("vpcId", vpc),
        text("ownerId", owner),
        items("routeSet", routes.collect::<Vec<_>>()),
        items("associationSet", associations.collect::<Vec<_>>()),
        items("propagatingVgwSet", []),
        filter::tag_set(&t.tags),
    ]
}

/// A route's destination as CreateRoute and DeleteRoute name it: `DestinationCidrBlock` (IPv4) or
/// `DestinationIpv6CidrBlock`, one of them.
fn destination(params: &mut Params) -> Result<(String, IpNet)> {
    let v4 = params.take("DestinationCidrBlock");
    let v6 = params.take("DestinationIpv6CidrBlock");
    let (name, value, want_v4) = match (v4, v6) {
        (Some(v), None) => ("DestinationCidrBlock", v, true),
        (None, Some(v)) => ("DestinationIpv6CidrBlock", v, false),
        (None, None) => {
            return Err(AwsError::client(
                "MissingParameter",
                "The request must contain the parameter DestinationCidrBlock or DestinationIpv6CidrBlock",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(AwsError::client(
                "InvalidParameterCombination",
                "DestinationCidrBlock and DestinationIpv6CidrBlock cannot both be given",
            ));
        }
    };
    let invalid = || {
        AwsError::invalid_value(format!(
            "Value ({value}) for parameter {name} is invalid. This is not a valid CIDR block."
        ))
    };
    let net: IpNet = value.parse().map_err(|_| invalid())?;
    if net.addr().is_ipv4() != want_v4 {
        return Err(invalid());
    }
    Ok((value, net))
}

/// The native table whose EC2 ID is `id`, and the EC2 view of its implicit routes.
async fn named_table(st: &AppState, id: &str) -> Result<(RouteTable, Vec<Ec2Route>)> {
    let tables = store::routes::list_tables(&st.db).await?;
    let t = native_table(&st.cfg.topology, &tables, id)?.clone();
    let implicit = implicit_routes(&st.cfg.topology, t.main);
    Ok((t, implicit))
}

pub async fn create(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let id = params.required("RouteTableId")?;
    let (given, net) = destination(params)?;
    let instance = params.take("InstanceId");
    // Targets EC2 has that the cloud does not: it routes to instances only.
    for other in [
        "GatewayId",
        "NatGatewayId",
        "NetworkInterfaceId",
        "VpcPeeringConnectionId",
        "TransitGatewayId",
        "EgressOnlyInternetGatewayId",
        "LocalGatewayId",
        "CarrierGatewayId",
        "VpcEndpointId",
        "CoreNetworkArn",
        "OdbNetworkArn",
        "DestinationPrefixListId",
    ] {
        if params.take(other).is_some() {
            return Err(AwsError::invalid_value(format!(
                "The parameter {other} is not supported: fakecloud routes to instances (InstanceId) only"
            )));
        }
    }
    let instance = instance.ok_or_else(|| {
        AwsError::client("MissingParameter", "The request must contain the parameter InstanceId (the route's target)")
    })?;
    params.finish()?;
    // Without reading the tables (the route controller makes one route per Node).
    check_id(&id)?;
    let (native, main) = (native_id(&st.cfg.topology, &id), is_main(&st.cfg.topology, &id));
    if !main && !ec2_form(&id) {
        return Err(not_found(&id));
    }
    if implicit_routes(&st.cfg.topology, main).iter().any(|r| r.destination == net) {
        // Only a table that exists has a route (EC2 says a table is unknown first).
        named_table(st, &id).await?;
        return Err(AwsError::client("RouteAlreadyExists", format!("The route identified by {given} already exists.")));
    }
    let req = CreateRouteRequest { name: given.clone(), destination: given, target_instance: instance };
    store::routes::create(&st.db, native, &req, None).await.map_err(|e| match e.code.as_ref() {
        codes::ROUTE_TABLE_NOT_FOUND => not_found(&id),
        _ => e.into(),
    })?;
    Ok(vec![text("return", "true")])
}

pub async fn delete(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let id = params.required("RouteTableId")?;
    let (given, net) = destination(params)?;
    params.finish()?;
    let (t, implicit) = named_table(st, &id).await?;
    if let Some(r) = implicit.iter().find(|r| r.destination == net) {
        let why = if r.gateway.as_deref() == Some("local") {
            "cannot remove local route"
        } else {
            "the internet gateway's route is the cloud's own and cannot be removed:"
        };
        return Err(AwsError::invalid_value(format!("{why} {given} in route table {id}")));
    }
    store::routes::delete_to(&st.db, &t.id, &given).await?;
    Ok(vec![text("return", "true")])
}

/// CreateRouteTable: a table of the cloud's VPC, with the local route only (a subnet associated with it is
/// private). Its `ClientToken` is taken but not kept: a create sent twice makes two tables.
pub async fn create_table(st: &AppState, keys: &Keys, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let vpc = params.required("VpcId")?;
    network::check_vpc(topo, &vpc)?;
    let tags = tag_rules::specified(params, "route-table")?;
    let token = params.take("ClientToken");
    params.finish()?;
    let made = store::routes::create_table(&st.db, None, &tags).await?;
    let shown = ec2_table(topo, &made, &[], &[], Some(&tags));
    let mut answer = vec![el("routeTable", table(&shown, &vpc, &keys.account_id))];
    answer.extend(token.map(|t| text("clientToken", t)));
    Ok(answer)
}

/// DeleteRouteTable: one with no routes of its own and no subnet associated (else `DependencyViolation`, as
/// EC2's "has dependencies and cannot be deleted"); never the main table.
pub async fn delete_table(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let id = params.required("RouteTableId")?;
    params.finish()?;
    let (t, _) = named_table(st, &id).await?;
    if t.main {
        return Err(AwsError::client(
            "DependencyViolation",
            format!("The routeTable '{id}' has dependencies and cannot be deleted: it is the VPC's main route table"),
        ));
    }
    store::routes::delete_table(&st.db, &t.id).await.map_err(|e| match e.code.as_ref() {
        codes::DEPENDENCY_VIOLATION => AwsError::client(
            "DependencyViolation",
            format!("The routeTable '{id}' has dependencies and cannot be deleted: {}", e.message),
        ),
        _ => e.into(),
    })?;
    Ok(vec![text("return", "true")])
}

/// AssociateRouteTable: a zone's subnet uses table `RouteTableId` from now on (a gateway's association, which
/// the cloud has no gateways for, is refused).
pub async fn associate(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let id = params.required("RouteTableId")?;
    for other in ["GatewayId", "PublicIpv4Pool"] {
        if params.take(other).is_some() {
            return Err(AwsError::invalid_value(format!(
                "The parameter {other} is not supported: fakecloud associates route tables with subnets only"
            )));
        }
    }
    let subnet = params.required("SubnetId")?;
    params.finish()?;
    let zone = network::zone_of_subnet(topo, &subnet)?;
    let (t, _) = named_table(st, &id).await?;
    let made = store::routes::associate(&st.db, &t.id, zone).await.map_err(|e| match e.code.as_ref() {
        codes::ZONE_ALREADY_ASSOCIATED => AwsError::client(
            "Resource.AlreadyAssociated",
            format!("the specified association for route table {id} conflicts with an existing association"),
        ),
        _ => e.into(),
    })?;
    Ok(vec![text("associationId", made.id), el("associationState", vec![text("state", "associated")])])
}

/// DisassociateRouteTable: the association's subnet uses the main table again. The main table's own
/// associations are the cloud's and stay.
pub async fn disassociate(st: &AppState, params: &mut Params) -> Result<Vec<Node>> {
    let topo = &st.cfg.topology;
    let id = params.required("AssociationId")?;
    params.finish()?;
    let main = table_id(topo, store::routes::MAIN_ID);
    let subnets = topo.zones.iter().map(|(z, _)| Some(network::subnet_id(topo, z))).chain([None]);
    if subnets.into_iter().any(|s| main_association(topo, &main, s.as_deref()) == id) {
        return Err(AwsError::invalid_value(format!(
            "The association {id} is the main route table's own and cannot be removed; associate its subnet with \
             another table instead"
        )));
    }
    store::routes::disassociate(&st.db, &id).await.map_err(|e| match e.code.as_ref() {
        codes::ROUTE_TABLE_ASSOCIATION_NOT_FOUND => {
            AwsError::client("InvalidAssociationID.NotFound", format!("The association ID '{id}' does not exist"))
        }
        _ => e.into(),
    })?;
    Ok(vec![text("return", "true")])
}
