//! Fault rules as the engine keeps them, the API's and the data plane's: added (named, or given the next
//! free name), listed with their counts, deleted; and a data-plane event judged by them.

use std::sync::Arc;

use fakecloud_api::{CreateFaultRuleRequest, CreateLbFaultRuleRequest, FaultRule, LbFaultRule};
use tokio::sync::watch;

use super::index_of;
use crate::db::now_ms;
use crate::error::{ApiError, Result};
use crate::faults::FaultEngine;
use crate::faults::lb_rules::{ActiveLbRule, LbEvent, LbFired, LbSubject};
use crate::faults::rules::{ActiveRule, check_position};
use crate::store::faults::RULE;

impl FaultEngine {
    /// The ID of a new rule of `kind`: the one `asked` for, unless `taken`, or a new `<prefix>-<n>`.
    async fn rule_id(
        &self,
        kind: &str,
        prefix: &str,
        asked: Option<&str>,
        taken: impl Fn(&str) -> bool,
    ) -> Result<String> {
        let id = match asked {
            Some(id) => id.to_string(),
            None => self.new_id(kind, prefix, &taken).await?,
        };
        if taken(&id) {
            return Err(ApiError::conflict(
                fakecloud_api::codes::FAULT_EXISTS,
                format!("a fault rule named {id:?} exists"),
            ));
        }
        Ok(id)
    }

    // ---------------------------------------------------------------------------------------------- rules

    pub async fn add_rule(&self, req: CreateFaultRuleRequest) -> Result<FaultRule> {
        check_position(req.position)?;
        let _edit = self.editing().await?;
        let mut rules = self.rules.write().await;
        let id = self.rule_id("rule", "fault", req.id.as_deref(), |id| rules.iter().any(|r| r.id == id)).await?;
        let rule = ActiveRule::new(id, req.matcher, req.action, req.trigger, &self.operations, self.seed, now_ms())?;
        let at = req.position.unwrap_or(rules.len()).min(rules.len());
        rules.insert(at, Arc::new(rule));
        for (i, r) in rules.iter().enumerate() {
            self.persist("rule", &r.id, i as i64, &r.stored()).await?;
        }
        tracing::info!(rule = %rules[at].id, position = at, "fault rule added");
        Ok(rules[at].to_api(None))
    }

    pub async fn list_rules(&self) -> Vec<FaultRule> {
        self.sync().await;
        let counts = self.shared_counts(RULE).await;
        let counted = |id: &str| counts.as_ref().map(|c| c.get(id).copied().unwrap_or_default());
        self.rules.read().await.iter().map(|r| r.to_api(counted(&r.id))).collect()
    }

    pub async fn delete_rule(&self, id: &str) -> Result<FaultRule> {
        let _edit = self.editing().await?;
        let mut rules = self.rules.write().await;
        let at = index_of(&rules, id, |r| &r.id, "fault rule")?;
        let counts = self.shared_counts(RULE).await.map(|c| c.get(id).copied().unwrap_or_default());
        self.forget(RULE, id).await?;
        Ok(rules.remove(at).to_api(counts))
    }

    // ---------------------------------------------------------------------------------------------- data-plane rules

    pub async fn add_lb_rule(&self, req: CreateLbFaultRuleRequest) -> Result<LbFaultRule> {
        let _edit = self.editing().await?;
        let mut rules = self.lb_rules.write().await;
        let id = self.rule_id("lb_rule", "lb-fault", req.id.as_deref(), |id| rules.iter().any(|r| r.id == id)).await?;
        let rule = ActiveLbRule::new(id, req.matcher, req.action, req.trigger, self.seed, now_ms())?;
        self.persist("lb_rule", &rule.id, rules.len() as i64, &rule.stored()).await?;
        tracing::info!(rule = %rule.id, "data-plane fault rule added");
        let api = rule.to_api();
        rules.push(Arc::new(rule));
        self.lb_rules_changed.send_modify(|n| *n += 1);
        Ok(api)
    }

    pub async fn list_lb_rules(&self) -> Vec<LbFaultRule> {
        self.sync().await;
        self.lb_rules.read().await.iter().map(|r| r.to_api()).collect()
    }

    pub async fn delete_lb_rule(&self, id: &str) -> Result<LbFaultRule> {
        let _edit = self.editing().await?;
        let mut rules = self.lb_rules.write().await;
        let at = index_of(&rules, id, |r| &r.id, "data-plane fault rule")?;
        self.forget("lb_rule", id).await?;
        let removed = rules.remove(at).to_api();
        self.lb_rules_changed.send_modify(|n| *n += 1);
        tracing::info!(rule = %id, "data-plane fault rule deleted");
        Ok(removed)
    }

    /// The first data-plane rule that fires for `event` on `lb`. Cheap when there are none.
    pub async fn judge_lb(&self, lb: &LbSubject, event: LbEvent<'_>) -> Option<LbFired> {
        self.sync().await;
        let rules = self.lb_rules.read().await;
        if rules.is_empty() {
            return None;
        }
        let now = now_ms();
        rules.iter().find_map(|r| r.judge(lb, event, now))
    }

    /// Whether a black-hole rule may fire now: a load balancer without a health check must still look.
    pub async fn black_hole_active(&self) -> bool {
        self.sync().await;
        let now = now_ms();
        self.lb_rules.read().await.iter().any(|r| r.black_hole_active(now))
    }

    /// Changes whenever the data-plane rules do.
    pub fn lb_rules_changed(&self) -> watch::Receiver<u64> {
        self.lb_rules_changed.subscribe()
    }
}
