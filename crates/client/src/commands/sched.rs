//! Scheduling commands: `queues` and `reservations [add | rm]`.

use super::{Out, print_json};
use crate::ClientError;
use crate::cli::ReservationsCommand;
use crate::http::{Api, decode};
use crate::table::Table;
use chrono::{DateTime, Utc};
use gpuhub_api::{CreateReservationRequest, QueueView, ReservationView};
use reqwest::Method;
use serde_json::Value;

/// `gpuhub queues`.
pub(crate) async fn queues(api: &Api, json: bool, out: Out<'_>) -> Result<(), ClientError> {
    let v = Value::Array(api.get_all_pages(&["queues"], &[]).await?);
    if json {
        return print_json(out, &v);
    }
    let list: Vec<QueueView> = decode(&v, api.url(&["queues"], &[]).as_str())?;
    write!(out, "{}", queues_text(&list))?;
    Ok(())
}

/// One line per queue, GPUs in whole GPUs: `QUEUE GPUS USED GUARANTEE BORROW PER USER RUNNING QUEUED YOU`.
pub(crate) fn queues_text(list: &[QueueView]) -> String {
    let mut t =
        Table::new(&["QUEUE", "GPUS USED", "GUARANTEE", "MAY BORROW", "PER USER", "RUNNING", "QUEUED", "OPEN TO YOU"]);
    for q in list {
        t.row(vec![
            q.name.clone(),
            q.used.gpus.to_string(),
            q.guarantee.gpus.to_string(),
            q.borrow_limit.and_then(|b| b.gpus).map_or_else(|| "any".to_owned(), |g| g.to_string()),
            q.user_limit.and_then(|b| b.gpus).map_or_else(|| "any".to_owned(), |g| g.to_string()),
            q.running.to_string(),
            q.queued.to_string(),
            if q.open_to_you { "yes" } else { "no" }.to_owned(),
        ]);
    }
    if list.is_empty() {
        return "no team queues; everything runs in the default queue (admins: gpuhub queue add NAME)\n".to_owned();
    }
    t.render("")
}

/// `gpuhub reservations`, `reservations add`, `reservations rm`.
pub(crate) async fn reservations(
    api: &Api,
    json: bool,
    cmd: Option<ReservationsCommand>,
    now: DateTime<Utc>,
    out: Out<'_>,
) -> Result<(), ClientError> {
    match cmd {
        None => {
            let v = Value::Array(api.get_all_pages(&["reservations"], &[]).await?);
            if json {
                return print_json(out, &v);
            }
            let list: Vec<ReservationView> = decode(&v, api.url(&["reservations"], &[]).as_str())?;
            write!(out, "{}", reservations_text(&list))?;
        }
        Some(ReservationsCommand::Add { id, queue, gpus, model, start, end, duration }) => {
            let start = start.unwrap_or(now);
            let end = match (end, duration) {
                (Some(e), _) => e,
                (None, Some(d)) => start + chrono::Duration::seconds(i64::try_from(d.0).unwrap_or(i64::MAX / 1000)),
                // clap requires one of them; an empty window is refused by the server
                (None, None) => start,
            };
            let req = CreateReservationRequest { id, queue, gpus, model, start, end };
            let v = api.send_json(Method::POST, &["reservations"], &req).await?.unwrap_or(Value::Null);
            if json {
                return print_json(out, &v);
            }
            let r: ReservationView = decode(&v, api.url(&["reservations"], &[]).as_str())?;
            writeln!(out, "{}", r.id)?;
        }
        Some(ReservationsCommand::Rm { id }) => {
            api.call(Method::DELETE, &["reservations", &id], &[], None).await?;
            if !json {
                writeln!(out, "removed {id}")?;
            }
        }
    }
    Ok(())
}

/// `ID QUEUE GPUS MODEL START END BY`, times in UTC to the minute.
pub(crate) fn reservations_text(list: &[ReservationView]) -> String {
    if list.is_empty() {
        return "no reservations\n".to_owned();
    }
    let mut t = Table::new(&["ID", "QUEUE", "GPUS", "MODEL", "START", "END", "BY"]);
    let when = |d: DateTime<Utc>| d.format("%Y-%m-%d %H:%M").to_string();
    for r in list {
        t.row(vec![
            r.id.clone(),
            r.queue.clone(),
            r.gpus.to_string(),
            r.model.clone().unwrap_or_else(|| "any".into()),
            when(r.start),
            when(r.end),
            r.created_by.clone(),
        ]);
    }
    t.render("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhub_core::Bytes;
    use gpuhub_core::quantity::GIB;

    #[test]
    fn queues_rendering() {
        use gpuhub_api::QuotaView;
        let gpus = |g: f64| QuotaView { gpus: g, cpus: 8.0, memory: Bytes(GIB) };
        let q = QueueView {
            name: "vision".into(),
            guarantee: gpus(2.0),
            borrow_limit: None,
            user_limit: None,
            weight: 1.0,
            used: gpus(1.25),
            running: 2,
            queued: 3,
            open_to_you: true,
            members: None,
            priority_classes: Vec::new(),
            team_gid: None,
            max_runtime: None,
            max_disk: None,
        };
        let limit = gpuhub_api::LimitView { gpus: Some(0.0), ..Default::default() };
        let nlp = QueueView { name: "nlp".into(), borrow_limit: Some(limit), open_to_you: false, ..q.clone() };
        assert_eq!(
            queues_text(&[q, nlp]),
            "QUEUE   GPUS USED  GUARANTEE  MAY BORROW  PER USER  RUNNING  QUEUED  OPEN TO YOU\n\
             vision  1.25       2          any         any       2        3       yes\n\
             nlp     1.25       2          0           any       2        3       no\n"
        );
        assert!(queues_text(&[]).contains("no team queues"));
    }

    #[test]
    fn reservations_rendering() {
        use chrono::TimeZone;
        let r = ReservationView {
            id: "deadline".into(),
            queue: "vision".into(),
            gpus: 2,
            model: Some("H200".into()),
            start: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            end: Utc.with_ymd_and_hms(2026, 12, 2, 12, 30, 0).unwrap(),
            created_by: "admin".into(),
        };
        assert_eq!(
            reservations_text(&[r]),
            "ID        QUEUE   GPUS  MODEL  START             END               BY\n\
             deadline  vision  2     H200   2026-12-01 00:00  2026-12-02 12:30  admin\n"
        );
        assert_eq!(reservations_text(&[]), "no reservations\n");
    }
}
