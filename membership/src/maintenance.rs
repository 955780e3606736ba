//! Calls beyond membership changes that the operator's checks need: one member's own view of
//! the member list, and the cluster's alarms. Each is bounded like every other client call.

use etcd_client::{AlarmAction, AlarmType};

use crate::client::convert_members;
use crate::preflight::{AlarmKind, RaisedAlarm};
use crate::{ClientError, EtcdClient, Member, MemberId, MemberUrl};

impl EtcdClient {
    /// The member list as the member at `endpoint` sees it (etcd 3.4 serves it from the
    /// member's local view, so two members can disagree while a change propagates).
    pub async fn member_list_at(&self, endpoint: &MemberUrl) -> Result<Vec<Member>, ClientError> {
        let resp = self
            .on(endpoint, |mut c| async move { c.member_list().await })
            .await
            .map_err(ClientError::Endpoint)?;
        convert_members(endpoint, resp.members())
    }

    /// Every raised alarm, sorted (asked of a voter: alarm reads go through raft).
    pub async fn alarms(&self) -> Result<Vec<RaisedAlarm>, ClientError> {
        let (resp, by) = self
            .on_any_voter("alarm list", |mut c| async move {
                c.alarm(AlarmAction::Get, AlarmType::None, None).await
            })
            .await?;
        let mut out = Vec::new();
        for a in resp.alarms() {
            let Some(kind) = AlarmKind::from_code(a.alarm() as i32) else {
                continue;
            };
            let member = MemberId::new(a.member_id()).ok_or_else(|| ClientError::BadAnswer {
                endpoint: by.clone(),
                reason: format!("alarm {kind} names member id 0"),
            })?;
            out.push(RaisedAlarm { member, kind });
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}
