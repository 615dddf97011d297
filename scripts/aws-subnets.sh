#!/usr/bin/env bash
# Reproduce cloud-provider-aws's "could not find any suitable subnets for creating the ELB" (issue #50) on a cluster
# set up for it (`make up CCM=aws`, `FAKECLOUD_KIND_CCM=aws make kind-up`), with the AWS CLI as an AWS user would.
#
# The CCM places an internet-facing ELB in the public subnets tagged as its cluster's (`kubernetes.io/cluster/<id>`),
# or in subnets no cluster claims; failing both, only in its own subnet (`SubnetID` in its cloud config: the
# region's first, as the stacks write it), and only if that one is public (`findSubnets`, `findELBSubnets`,
# `isSubnetPublic`: aws.go L1648, L1687, L1882). So a VPC whose subnets are tagged for another cluster, with the
# nodes in a private subnet, leaves every new LoadBalancer Service <pending>.
#
# Usage: scripts/aws-subnets.sh another-cluster|tagged|as-made [CLUSTER_ID]
#   another-cluster  the subnets tagged for another cluster only, and the CCM's own subnet private (a route table
#                    of its own, without the internet gateway's route). A new LoadBalancer Service stays <pending>:
#                    SyncLoadBalancerFailed ... could not find any suitable subnets for creating the ELB.
#   tagged           the users' fix: the subnets tagged as this cluster's too (`shared`). The pending Service gets
#                    its ELB, in the public subnets only.
#   as-made          back as the stack made them: the private table gone, the other cluster's tag removed, the
#                    cluster's own (`owned`) back.
# CLUSTER_ID is the CCM's (default: fakecloud, the stacks'). Environment: the face's endpoint, region and keys
# (`source .run/aws.env`, as `make up CCM=aws` says); AWS_CLI, the AWS CLI (default: `aws` on PATH; `make
# aws-clients` installs one).
set -euo pipefail

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}
[ $# -eq 1 ] || [ $# -eq 2 ] || usage
case $1 in another-cluster | tagged | as-made) ;; *) usage ;; esac
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
	echo "AWS_ENDPOINT_URL is not set: source the stack's aws.env first (make up CCM=aws prints where it is)" >&2
	exit 1
fi
aws=${AWS_CLI:-aws}
command -v "$aws" >/dev/null || {
	echo "no AWS CLI at '$aws': make aws-clients installs one (its bin/aws); set AWS_CLI to it or put it on PATH" >&2
	exit 1
}
cluster="kubernetes.io/cluster/${2:-fakecloud}"
other="kubernetes.io/cluster/another-cluster"
# The private table is found again by this tag, so each step may be run twice.
private_tag="fakecloud.io/private-subnets"

ec2() { "$aws" ec2 --output text "$@"; }
read -ra subnets <<<"$(ec2 describe-subnets --query 'Subnets[].SubnetId')"
own=${subnets[0]}
vpc=$(ec2 describe-vpcs --query 'Vpcs[0].VpcId')
private=$(ec2 describe-route-tables --filters "Name=tag-key,Values=$private_tag" --query 'RouteTables[0].RouteTableId')
[ "$private" != None ] || private=

case $1 in
another-cluster)
	ec2 delete-tags --resources "${subnets[@]}" --tags "Key=$cluster"
	ec2 create-tags --resources "${subnets[@]}" --tags "Key=$other,Value=owned"
	if [ -z "$private" ]; then
		private=$(ec2 create-route-table --vpc-id "$vpc" --query RouteTable.RouteTableId \
			--tag-specifications "ResourceType=route-table,Tags=[{Key=$private_tag,Value=yes}]")
		ec2 associate-route-table --route-table-id "$private" --subnet-id "$own" >/dev/null
	fi
	echo "subnets ${subnets[*]} tagged for another cluster only; $own (the CCM's own) private, through $private"
	;;
tagged)
	ec2 create-tags --resources "${subnets[@]}" --tags "Key=$cluster,Value=shared"
	echo "subnets ${subnets[*]} tagged as $cluster's (shared)"
	;;
as-made)
	if [ -n "$private" ]; then
		for association in $(ec2 describe-route-tables --route-table-ids "$private" \
			--query 'RouteTables[0].Associations[].RouteTableAssociationId'); do
			ec2 disassociate-route-table --association-id "$association"
		done
		ec2 delete-route-table --route-table-id "$private"
	fi
	ec2 delete-tags --resources "${subnets[@]}" --tags "Key=$other"
	ec2 create-tags --resources "${subnets[@]}" --tags "Key=$cluster,Value=owned"
	echo "subnets ${subnets[*]} as the stack made them: public, tagged as $cluster's"
	;;
esac
