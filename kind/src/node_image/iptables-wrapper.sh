#!/bin/sh
# Picks the iptables backend the host (node) uses, once; then every iptables command is the real one.
set -eu
hint='KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY'
if (iptables-nft-save -t mangle; ip6tables-nft-save -t mangle) 2>/dev/null | grep -Eq "$hint"; then
	mode=nft
elif (iptables-legacy-save -t mangle; ip6tables-legacy-save -t mangle) 2>/dev/null | grep -Eq "$hint"; then
	mode=legacy
else
	legacy=$( (iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -c '^-' || true)
	nft=$( (iptables-nft-save; ip6tables-nft-save) 2>/dev/null | grep -c '^-' || true)
	if [ "${legacy:-0}" -gt "${nft:-0}" ]; then mode=legacy; else mode=nft; fi
fi
for family in iptables ip6tables; do
	ln -sf "$family-$mode" "/usr/sbin/$family"
	ln -sf "$family-$mode-save" "/usr/sbin/$family-save"
	ln -sf "$family-$mode-restore" "/usr/sbin/$family-restore"
done
exec "$0" "$@"
