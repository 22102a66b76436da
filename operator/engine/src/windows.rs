//! `spec.windows` and admin freezes (pure): whether a change may be written now, and if not,
//! why and when it may.
//!
//! A window starts at every time its cron `schedule` names (read in its `timeZone`, with
//! daylight-saving gaps and folds as the time-zone database says) and lasts `duration`. With
//! any `Allow` window, writing is open only inside one; inside any `Deny` window it is
//! closed; a freeze closes it until lifted. Schedules are parsed by `croner` (standard cron:
//! 5 fields, or 6 with seconds first; day-of-week 0 and 7 are Sunday) on `jiff` times, whose
//! built-in time-zone database makes `Europe/Berlin` mean the same on every node.

use std::time::Duration;

use croner::{
    Cron,
    parser::{CronParser, Seconds, Year},
};
use imagewatch_crd::{Window, WindowKind, conditions::reason};
use jiff::{Timestamp, Zoned, tz::TimeZone};

use crate::duration::{human, parse_duration};

/// One window of `spec.windows`, parsed.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// `spec.windows[<index>]`.
    pub index: usize,
    /// Allow or Deny.
    pub kind: WindowKind,
    cron: Cron,
    duration: Duration,
    tz: TimeZone,
    /// `schedule` as written.
    text: String,
    /// `timeZone` as written (`UTC` when not).
    zone: String,
}

/// Parses `spec.windows`; the error names the field (`spec.windows[1].timeZone: …`).
pub fn parse(windows: &[Window]) -> Result<Vec<Schedule>, String> {
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build();
    windows
        .iter()
        .enumerate()
        .map(|(index, w)| {
            let field = |name: &str| format!("spec.windows[{index}].{name}");
            let cron = parser
                .parse(&w.schedule)
                .map_err(|e| format!("{} {:?}: {e}", field("schedule"), w.schedule))?;
            let duration = parse_duration(&w.duration)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    format!(
                        "{} {:?} is not a duration above 0 such as 8h",
                        field("duration"),
                        w.duration
                    )
                })?;
            let zone = w.time_zone.clone().unwrap_or_else(|| "UTC".to_string());
            let tz = TimeZone::get(&zone).map_err(|_| {
                format!(
                    "{} {zone:?} is not an IANA time zone (such as Europe/Berlin or UTC)",
                    field("timeZone")
                )
            })?;
            Ok(Schedule {
                index,
                kind: w.kind.unwrap_or_default(),
                cron,
                duration,
                tz,
                text: w.schedule.trim().to_string(),
                zone,
            })
        })
        .collect()
}

impl Schedule {
    /// When the window that is open at `now` closes (`None`: not open at `now`).
    fn open_until(&self, now: Timestamp) -> Option<Timestamp> {
        let here = now.to_zoned(self.tz.clone());
        let start = self.cron.find_previous_occurrence(&here, true).ok()?;
        let end = start.timestamp().checked_add(self.duration).ok()?;
        (now < end).then_some(end)
    }

    /// The next start after `now`.
    fn next_start(&self, now: Timestamp) -> Option<Timestamp> {
        let here: Zoned = now.to_zoned(self.tz.clone());
        self.cron
            .find_next_occurrence(&here, false)
            .ok()
            .map(|z| z.timestamp())
    }

    /// `spec.windows[0] (0 9 * * 1-5 for 8h, Europe/Berlin)`.
    fn describe(&self) -> String {
        format!(
            "spec.windows[{}] ({} for {}, {})",
            self.index,
            self.text,
            human(self.duration),
            self.zone
        )
    }
}

/// Why nothing is written now, although a change may be due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pause {
    /// `spec.suspend`.
    Suspended,
    /// Outside the windows, or frozen.
    Closed(Closed),
}

/// Writing is closed by the windows or a freeze.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// `OutsideWindow` or `Frozen`.
    pub reason: &'static str,
    /// Why, in words (`outside spec.windows[0] (…) until …`).
    pub why: String,
    /// When writing opens again (`None`: not foreseeable, e.g. until a freeze is lifted).
    pub opens: Option<Timestamp>,
}

impl Pause {
    /// The condition reason: `Suspended`, `OutsideWindow` or `Frozen`.
    pub fn reason(&self) -> &'static str {
        match self {
            Pause::Suspended => reason::SUSPENDED,
            Pause::Closed(c) => c.reason,
        }
    }

    /// The start of a status message: `suspended`, or why writing is closed.
    pub fn label(&self) -> &str {
        match self {
            Pause::Suspended => "suspended",
            Pause::Closed(c) => &c.why,
        }
    }

    /// Whether it is reported on the status: a suspended object always says so; outside a
    /// window or in a freeze, only when a change waits (an object with nothing to write is
    /// simply up to date, and Argo CD keeps showing it Healthy).
    pub fn shows(&self, change_due: bool) -> bool {
        matches!(self, Pause::Suspended) || change_due
    }

    /// When writing opens again, if foreseeable.
    pub fn opens(&self) -> Option<Timestamp> {
        match self {
            Pause::Suspended => None,
            Pause::Closed(c) => c.opens,
        }
    }
}

/// Search steps for the next opening (each step passes one window's start or end).
const MAX_STEPS: usize = 64;

/// Whether writing is closed at `now` by `schedules` or by `freeze` (the freeze's reason,
/// as the admin wrote it); `None` when it is open.
pub fn closed(schedules: &[Schedule], freeze: Option<&str>, now: Timestamp) -> Option<Closed> {
    if let Some(freeze) = freeze {
        return Some(Closed {
            reason: reason::FROZEN,
            why: format!("frozen ({freeze}) until the freeze is lifted"),
            opens: None,
        });
    }
    let why = blocked(schedules, now)?;
    let opens = next_opening(schedules, now);
    let when = match opens {
        Some(at) => format!(
            "; the next window opens at {}",
            at.round(jiff::Unit::Second).unwrap_or(at)
        ),
        None => "; no window opens within the schedules' reach".to_string(),
    };
    Some(Closed {
        reason: reason::OUTSIDE_WINDOW,
        why: format!("{why}{when}"),
        opens,
    })
}

/// What closes writing at `t`, in words; `None` when it is open.
fn blocked(schedules: &[Schedule], t: Timestamp) -> Option<String> {
    if let Some((deny, until)) = schedules
        .iter()
        .filter(|s| s.kind == WindowKind::Deny)
        .find_map(|s| s.open_until(t).map(|until| (s, until)))
    {
        return Some(format!(
            "inside deny window {} until {}",
            deny.describe(),
            until.round(jiff::Unit::Second).unwrap_or(until)
        ));
    }
    let allows: Vec<&Schedule> = schedules
        .iter()
        .filter(|s| s.kind == WindowKind::Allow)
        .collect();
    if !allows.is_empty() && !allows.iter().any(|s| s.open_until(t).is_some()) {
        let names: Vec<String> = allows.iter().map(|s| s.describe()).collect();
        return Some(format!("outside allow window {}", names.join(", ")));
    }
    None
}

/// The first time after `now` at which writing is open (`None` if none is found within
/// [`MAX_STEPS`] window starts and ends).
pub fn next_opening(schedules: &[Schedule], now: Timestamp) -> Option<Timestamp> {
    let mut t = now;
    for _ in 0..MAX_STEPS {
        let denies_end = schedules
            .iter()
            .filter(|s| s.kind == WindowKind::Deny)
            .filter_map(|s| s.open_until(t))
            .max();
        if let Some(end) = denies_end {
            t = end;
            continue;
        }
        let allows: Vec<&Schedule> = schedules
            .iter()
            .filter(|s| s.kind == WindowKind::Allow)
            .collect();
        if allows.is_empty() || allows.iter().any(|s| s.open_until(t).is_some()) {
            return Some(t);
        }
        t = allows.iter().filter_map(|s| s.next_start(t)).min()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(kind: WindowKind, schedule: &str, duration: &str, tz: Option<&str>) -> Window {
        Window {
            kind: Some(kind),
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: tz.map(str::to_string),
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    /// Weekdays 09:00–17:00 in Berlin, no changes from 24 to 26 December.
    fn office() -> Vec<Schedule> {
        parse(&[
            window(
                WindowKind::Allow,
                "0 9 * * 1-5",
                "8h",
                Some("Europe/Berlin"),
            ),
            window(
                WindowKind::Deny,
                "0 0 24 12 *",
                "48h",
                Some("Europe/Berlin"),
            ),
        ])
        .unwrap()
    }

    #[test]
    fn inside_an_allow_window_is_open() {
        // Monday 2026-12-07 10:00 in Berlin is 09:00 UTC.
        assert_eq!(closed(&office(), None, at("2026-12-07T09:00:00Z")), None);
    }

    #[test]
    fn outside_the_allow_windows_names_them_and_the_next_opening() {
        // Saturday 2026-12-05 12:00 UTC: next open Monday 09:00 Berlin = 08:00 UTC.
        let c = closed(&office(), None, at("2026-12-05T12:00:00Z")).unwrap();
        assert_eq!(c.reason, "OutsideWindow");
        assert_eq!(c.opens, Some(at("2026-12-07T08:00:00Z")));
        assert!(
            c.why.starts_with(
                "outside allow window spec.windows[0] (0 9 * * 1-5 for 8h, Europe/Berlin)"
            ),
            "{}",
            c.why
        );
        assert!(c.why.contains("2026-12-07T08:00:00Z"), "{}", c.why);
    }

    #[test]
    fn a_deny_window_inside_an_allow_window_closes_until_the_next_allowed_time_after_it() {
        // Thursday 24 December 10:00 Berlin: denied until the 26th 00:00 (a Saturday), so
        // the next opening is Monday the 28th 09:00 Berlin.
        let c = closed(&office(), None, at("2026-12-24T09:00:00Z")).unwrap();
        assert!(
            c.why.starts_with("inside deny window spec.windows[1]"),
            "{}",
            c.why
        );
        assert_eq!(c.opens, Some(at("2026-12-28T08:00:00Z")));
    }

    #[test]
    fn daylight_saving_time_moves_the_utc_opening() {
        // Summer: 09:00 Berlin is 07:00 UTC (Monday 2026-06-08).
        let c = closed(&office(), None, at("2026-06-07T12:00:00Z")).unwrap();
        assert_eq!(c.opens, Some(at("2026-06-08T07:00:00Z")));
    }

    #[test]
    fn only_deny_windows_leave_everything_else_open() {
        let w = parse(&[window(WindowKind::Deny, "0 22 * * *", "10h", None)]).unwrap();
        assert_eq!(closed(&w, None, at("2026-12-07T12:00:00Z")), None);
        let c = closed(&w, None, at("2026-12-07T23:00:00Z")).unwrap();
        assert_eq!(c.opens, Some(at("2026-12-08T08:00:00Z")));
    }

    #[test]
    fn a_freeze_closes_with_no_foreseeable_opening() {
        let c = closed(&[], Some("release 4.2"), at("2026-12-07T09:00:00Z")).unwrap();
        assert_eq!(c.reason, "Frozen");
        assert_eq!(c.opens, None);
        assert!(c.why.contains("release 4.2"), "{}", c.why);
    }

    #[test]
    fn seconds_are_allowed_first() {
        let w = parse(&[window(WindowKind::Allow, "30 0 12 * * *", "1m", None)]).unwrap();
        let c = closed(&w, None, at("2026-12-07T12:00:00Z")).unwrap();
        assert_eq!(c.opens, Some(at("2026-12-07T12:00:30Z")));
        assert_eq!(closed(&w, None, at("2026-12-07T12:01:00Z")), None);
        assert!(closed(&w, None, at("2026-12-07T12:01:30Z")).is_some());
    }

    #[test]
    fn sunday_is_0_and_7() {
        for dow in ["0", "7", "SUN"] {
            let w = parse(&[window(
                WindowKind::Allow,
                &format!("0 0 * * {dow}"),
                "24h",
                None,
            )])
            .unwrap();
            // 2026-12-06 is a Sunday.
            assert_eq!(closed(&w, None, at("2026-12-06T12:00:00Z")), None, "{dow}");
        }
    }

    #[test]
    fn bad_windows_name_the_field() {
        let err = |w: Window| parse(&[w]).unwrap_err();
        assert!(
            err(window(WindowKind::Allow, "61 * * * *", "1h", None))
                .starts_with("spec.windows[0].schedule \"61 * * * *\""),
        );
        assert!(
            err(window(WindowKind::Allow, "0 9 * * *", "soon", None))
                .starts_with("spec.windows[0].duration")
        );
        assert!(
            err(window(
                WindowKind::Allow,
                "0 9 * * *",
                "1h",
                Some("Mars/Base")
            ))
            .starts_with("spec.windows[0].timeZone \"Mars/Base\"")
        );
        assert!(err(window(WindowKind::Allow, "0 9 * * * 2026", "1h", None)).contains("schedule"));
    }

    #[test]
    fn pause_reasons_and_labels() {
        assert_eq!(Pause::Suspended.reason(), "Suspended");
        assert_eq!(Pause::Suspended.label(), "suspended");
        let c = closed(&[], Some("incident 12"), at("2026-12-07T09:00:00Z")).unwrap();
        let p = Pause::Closed(c);
        assert_eq!(p.reason(), "Frozen");
        assert!(p.label().starts_with("frozen (incident 12)"));
    }
}
