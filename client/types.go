package client

import (
	"encoding/json"
	"time"
)

// The records of the admin API, as its OpenAPI document (GET /openapi.json) names
// them; a test keeps their fields and the document's in step. Free-form JSON (params,
// schemas, details) is json.RawMessage. A number the server may leave unset (a
// template's lease_seconds, say) is zero when it is: zero in what you send means
// "the server's default". A time the server leaves null (a dispatch's finished_at
// while it is open) is the zero time, left out of JSON made from the record.

// Template is a parameter template: the JSON Schema a task's params must satisfy and
// the defaults its tasks inherit.
type Template struct {
	ID   int64  `json:"id,omitzero"`
	Name string `json:"name"`
	// Schema is the params' JSON Schema; CreateTemplate sends {} (any params) when
	// it is empty.
	Schema                json.RawMessage `json:"schema,omitzero"`
	LeaseSeconds          int             `json:"lease_seconds,omitzero"`
	MaxAttempts           int             `json:"max_attempts,omitzero"`
	RetryBackoffSeconds   int             `json:"retry_backoff_seconds,omitzero"`
	RetryMultiplier       float64         `json:"retry_multiplier,omitzero"`
	RetryMaxSeconds       int             `json:"retry_max_seconds,omitzero"`
	DispatchRatePerMinute int             `json:"dispatch_rate_per_minute,omitzero"`
	ConfirmSeconds        int             `json:"confirm_seconds,omitzero"`
	Stages                []string        `json:"stages,omitzero"`
	ResultSchema          json.RawMessage `json:"result_schema,omitzero"`
	Windows               []Window        `json:"windows,omitzero"`
	DDI                   bool            `json:"ddi,omitzero"`

	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	Version   Version   `json:"version,omitzero"`
	Warnings  []Warning `json:"warnings,omitzero"`
}

// Task is a one-time (Kind "once") or rotating ("rotate") task. Executor targets it:
// "uid_<id>" for one user, "gid_<id>" for a group.
type Task struct {
	// Kind is "once" or "rotate"; CreateTask needs it.
	Kind       string          `json:"kind,omitzero"`
	Executor   string          `json:"executor,omitzero"`
	TemplateID int64           `json:"template_id,omitzero"`
	StartTime  time.Time       `json:"start_time,omitzero"`
	Params     json.RawMessage `json:"params,omitzero"`
	// DispatchTimes is the quota per occurrence: -1 unlimited; zero means 1.
	DispatchTimes int `json:"dispatch_times,omitzero"`
	// Mode is "once_per_user" (the default) or "until_exhausted".
	Mode     string `json:"mode,omitzero"`
	Priority int    `json:"priority,omitzero"`
	// Status is "active" (the default) or "paused"; the server shows "deleted" too.
	Status string `json:"status,omitzero"`

	LeaseSeconds          int      `json:"lease_seconds,omitzero"`
	MaxAttempts           int      `json:"max_attempts,omitzero"`
	RetryBackoffSeconds   int      `json:"retry_backoff_seconds,omitzero"`
	RetryMultiplier       float64  `json:"retry_multiplier,omitzero"`
	RetryMaxSeconds       int      `json:"retry_max_seconds,omitzero"`
	DispatchRatePerMinute int      `json:"dispatch_rate_per_minute,omitzero"`
	ConfirmSeconds        int      `json:"confirm_seconds,omitzero"`
	Rollout               *Rollout `json:"rollout,omitzero"`
	Windows               []Window `json:"windows,omitzero"`

	// A rotating task's schedule: every SpaceMinutes, or by Cron in TimeZone.
	SpaceMinutes int       `json:"space_minutes,omitzero"`
	Cron         string    `json:"cron,omitzero"`
	TimeZone     string    `json:"time_zone,omitzero"`
	EndTime      time.Time `json:"end_time,omitzero"`
	// Misfire is "catch_up", "latest" or "skip".
	Misfire string `json:"misfire,omitzero"`

	// What the server sets.
	TaskID    string    `json:"task_id,omitzero"` // "once:12": what the task calls take
	ID        int64     `json:"id,omitzero"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Inherited names the settings taken from the template; Own is what the task
	// itself sets.
	Inherited []string        `json:"inherited,omitzero"`
	Own       json.RawMessage `json:"own,omitzero"`
	Version   Version         `json:"version,omitzero"`
	Warnings  []Warning       `json:"warnings,omitzero"`
	// Outcome is how a task that will dispatch no more ended: "done", "dead",
	// "ended"; empty while it may.
	Outcome string `json:"outcome,omitzero"`
}

// Rollout releases a task's quota in phases, each gated on the previous one's results.
type Rollout struct {
	Phases []Phase `json:"phases"`
	Gate   *Gate   `json:"gate,omitzero"`
	// Advance is "auto" or "manual".
	Advance     string `json:"advance,omitzero"`
	BakeSeconds int    `json:"bake_seconds,omitzero"`
	// Targeting is "continuous" or "snapshot".
	Targeting string `json:"targeting,omitzero"`
	// OnAbort is "keep" or "cancel".
	OnAbort        string  `json:"on_abort,omitzero"`
	RatePerMinute  int     `json:"rate_per_minute,omitzero"`
	RateFactor     float64 `json:"rate_factor,omitzero"`
	ConfirmSeconds int     `json:"confirm_seconds,omitzero"`
	// BakeTime is "wall" or "in_windows".
	BakeTime string `json:"bake_time,omitzero"`
}

// Phase is a rollout phase's cumulative cap: a Percent of the quota or a Count.
type Phase struct {
	Percent float64 `json:"percent,omitzero"`
	Count   int     `json:"count,omitzero"`
}

// Gate decides a rollout phase from its finished dispatches.
type Gate struct {
	MinFinished  int     `json:"min_finished,omitzero"`
	SuccessRatio float64 `json:"success_ratio,omitzero"`
	FailureRatio float64 `json:"failure_ratio,omitzero"`
}

// Window is a recurring time a task may be claimed in: from each Cron time, for
// Minutes, in TimeZone (UTC by default).
type Window struct {
	Cron     string `json:"cron"`
	Minutes  int    `json:"minutes"`
	TimeZone string `json:"time_zone,omitzero"`
}

// Warning is something the server accepted but thinks you should know.
type Warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Dispatch is one attempt of one task's occurrence for one uid: its record.
type Dispatch struct {
	LogID   string    `json:"log_id"`
	UID     string    `json:"uid"`
	TaskID  string    `json:"task_id"`
	DueAt   time.Time `json:"due_at,omitzero"`
	Attempt int       `json:"attempt"`
	// State is open, retry_wait, done, failed, expired, dead, cancelled, staged or
	// unconfirmed.
	State string `json:"state"`
	// Result is "success", "failure" or empty (none yet).
	Result         string          `json:"result"`
	Detail         json.RawMessage `json:"detail"`
	Checkpoint     json.RawMessage `json:"checkpoint"`
	Stage          string          `json:"stage"`
	DispatchedAt   time.Time       `json:"dispatched_at,omitzero"`
	LeaseExpiresAt time.Time       `json:"lease_expires_at,omitzero"`
	RetryAt        time.Time       `json:"retry_at,omitzero"`
	FinishedAt     time.Time       `json:"finished_at,omitzero"`
	RetriedAt      time.Time       `json:"retried_at,omitzero"`
	CancelledAt    time.Time       `json:"cancelled_at,omitzero"`
	Resumed        bool            `json:"resumed"`
	RolloutPhase   int             `json:"rollout_phase"`
	Reason         string          `json:"reason"`
	ConfirmBy      time.Time       `json:"confirm_by,omitzero"`
	// Final says no attempt follows this one.
	Final bool `json:"final"`
}

// Event is a dispatch's step, as the event store keeps it.
type Event struct {
	EventID string `json:"event_id"`
	// Type is dispatch, complete, expire, redo, dead, cancel, retry or missed.
	Type      string    `json:"type"`
	LogID     string    `json:"log_id"`
	UID       string    `json:"uid"`
	TaskID    string    `json:"task_id"`
	DueAt     time.Time `json:"due_at,omitzero"`
	Attempt   int       `json:"attempt"`
	Result    string    `json:"result"`
	At        time.Time `json:"at,omitzero"`
	Stage     string    `json:"stage"`
	Reason    string    `json:"reason"`
	Final     bool      `json:"final"`
	Missed    int       `json:"missed"`
	LastDueAt time.Time `json:"last_due_at,omitzero"`
}

// TaskStats is one task's figures over a time range.
type TaskStats struct {
	TaskID       string `json:"task_id"`
	Dispatched   int    `json:"dispatched"`
	Completed    int    `json:"completed"`
	Failed       int    `json:"failed"`
	Expired      int    `json:"expired"`
	Redo         int    `json:"redo"`
	Dead         int    `json:"dead"`
	LatencyMsP50 *int   `json:"latency_ms_p50"`
	LatencyMsP95 *int   `json:"latency_ms_p95"`
	Claimed      int    `json:"claimed"`
	// Remaining is nil for an unlimited quota.
	Remaining *int `json:"remaining"`
	Missed    int  `json:"missed"`
}

// VersionStats is the figures of the agents reporting one version.
type VersionStats struct {
	Version    string `json:"version"`
	Clients    int    `json:"clients"`
	Dispatched int    `json:"dispatched"`
	Completed  int    `json:"completed"`
	Failed     int    `json:"failed"`
	Expired    int    `json:"expired"`
}

// Occurrence is one due time of a task, as the schedule shows it.
type Occurrence struct {
	TaskID    string    `json:"task_id"`
	DueAt     time.Time `json:"due_at,omitzero"`
	Priority  int       `json:"priority"`
	Claimed   int       `json:"claimed"`
	Remaining *int      `json:"remaining"`
	LocalTime string    `json:"local_time"`
	TimeZone  string    `json:"time_zone"`
}

// Schedule is the occurrences due in a time range.
type Schedule struct {
	Occurrences []Occurrence `json:"occurrences"`
	// Truncated says there were more than the server lists.
	Truncated bool `json:"truncated"`
}

// Preview is what a task would dispatch, before it is created.
type Preview struct {
	UIDs    []string `json:"uids"`
	Summary struct {
		TotalDispatches int `json:"total_dispatches"`
		UIDs            int `json:"uids"`
	} `json:"summary"`
	Occurrences []struct {
		DueAt      time.Time `json:"due_at,omitzero"`
		Recipients int       `json:"recipients"`
		LocalTime  string    `json:"local_time"`
		TimeZone   string    `json:"time_zone"`
	} `json:"occurrences"`
	Warnings []Warning `json:"warnings"`
}

// RolloutState is where a task's rollout stands.
type RolloutState struct {
	TaskID string `json:"task_id"`
	// State is running, baking, waiting, paused, aborted or completed.
	State        string `json:"state"`
	Phase        int    `json:"phase"`
	Phases       int    `json:"phases"`
	Cap          *int   `json:"cap"`
	Quota        int    `json:"quota"`
	Claimed      int    `json:"claimed"`
	PhaseClaimed int    `json:"phase_claimed"`
	Finished     int    `json:"finished"`
	Succeeded    int    `json:"succeeded"`
	Failed       int    `json:"failed"`
	Unconfirmed  int    `json:"unconfirmed"`
	// Gate is pending, passed or failed.
	Gate           string        `json:"gate"`
	GateFailed     bool          `json:"gate_failed"`
	PhaseStartedAt time.Time     `json:"phase_started_at,omitzero"`
	BakeUntil      time.Time     `json:"bake_until,omitzero"`
	MayAdvanceAt   time.Time     `json:"may_advance_at,omitzero"`
	Rollout        Rollout       `json:"rollout"`
	History        []RolloutMove `json:"history"`
	// Version is the rollout's ETag, for MoveRollout's IfMatch: what Rollout and
	// MoveRollout answer has it, a rollout of Rollouts does not.
	Version Version `json:"-"`
}

// RolloutMove is a move that ended a phase (or the rollout), a pause or a resume.
type RolloutMove struct {
	Phase       int       `json:"phase"`
	At          time.Time `json:"at,omitzero"`
	Event       string    `json:"event"`
	Claimed     int       `json:"claimed"`
	Finished    int       `json:"finished"`
	Succeeded   int       `json:"succeeded"`
	Failed      int       `json:"failed"`
	Unconfirmed int       `json:"unconfirmed"`
	Actor       string    `json:"actor"`
	Reason      string    `json:"reason"`
}

// Group is a group of uids: kept by hand, or dynamic (its members the agents whose
// labels match Selector and whose version matches AgentVersion).
type Group struct {
	GID          string `json:"gid"`
	Dynamic      bool   `json:"dynamic"`
	Selector     string `json:"selector"`
	AgentVersion string `json:"agent_version"`
	// Members counts the group's members; Tasks (in lists) its tasks.
	Members  int       `json:"members"`
	Tasks    int       `json:"tasks"`
	Warnings []Warning `json:"warnings"`
}

// ClientInfo is a uid as the fleet view shows it.
type ClientInfo struct {
	UID         string     `json:"uid"`
	LastSeen    time.Time  `json:"last_seen,omitzero"`
	Keys        int        `json:"keys"`
	Open        int        `json:"open"`
	MaxInFlight int        `json:"max_in_flight"`
	Agent       *AgentInfo `json:"agent"`
	// UpdatedAt and Version are the settings' (ClientInfo and SetMaxInFlight).
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	Version   Version   `json:"version"`
}

// AgentInfo is what an agent last said of itself.
type AgentInfo struct {
	Version  string            `json:"version"`
	Hostname string            `json:"hostname"`
	Labels   map[string]string `json:"labels"`
}

// Campaign is a run of one template over many items.
type Campaign struct {
	ID         int64           `json:"id"`
	Name       string          `json:"name"`
	TemplateID int64           `json:"template_id"`
	Params     json.RawMessage `json:"params"`
	Executor   string          `json:"executor"`
	// Items is "count" or "uids".
	Items               string       `json:"items"`
	Total               int64        `json:"total"`
	RatePerSecond       float64      `json:"rate_per_second"`
	Window              int          `json:"window"`
	ErrorBudget         *ErrorBudget `json:"error_budget"`
	LeaseSeconds        int          `json:"lease_seconds"`
	MaxAttempts         int          `json:"max_attempts"`
	RetryBackoffSeconds int          `json:"retry_backoff_seconds"`
	Windows             []Window     `json:"windows"`
	// State is created, running, paused, stopping, stopped or finished.
	State      string    `json:"state"`
	Reason     string    `json:"reason"`
	Offset     int64     `json:"offset"`
	Done       int64     `json:"done"`
	Failed     int64     `json:"failed"`
	InFlight   int64     `json:"in_flight"`
	CreatedAt  time.Time `json:"created_at,omitzero"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Version is the campaign's ETag, for MoveCampaign's IfMatch: what Campaign,
	// CreateCampaign, UploadCampaignItems and MoveCampaign answer has it, a campaign
	// of a list does not.
	Version Version `json:"-"`
}

// CampaignSpec is a campaign to create.
type CampaignSpec struct {
	Name       string          `json:"name"`
	TemplateID int64           `json:"template_id"`
	Params     json.RawMessage `json:"params,omitzero"`
	Executor   string          `json:"executor"`
	// Items is Count items (0..Count-1), or a list of uids: an empty, non-nil list to
	// upload them later (UploadCampaignItems).
	Items struct {
		Count int64    `json:"count,omitzero"`
		UIDs  []string `json:"uids,omitzero"`
	} `json:"items"`
	RatePerSecond       float64      `json:"rate_per_second,omitzero"`
	Window              int          `json:"window,omitzero"`
	ErrorBudget         *ErrorBudget `json:"error_budget,omitzero"`
	LeaseSeconds        int          `json:"lease_seconds,omitzero"`
	MaxAttempts         int          `json:"max_attempts,omitzero"`
	RetryBackoffSeconds int          `json:"retry_backoff_seconds,omitzero"`
	Windows             []Window     `json:"windows,omitzero"`
}

// ErrorBudget pauses a campaign at MaxFailures failures within PerSeconds.
type ErrorBudget struct {
	MaxFailures int `json:"max_failures"`
	PerSeconds  int `json:"per_seconds"`
}

// CampaignFailures is a campaign's latest failures.
type CampaignFailures struct {
	CampaignID     int64             `json:"campaign_id"`
	State          string            `json:"state"`
	Reason         string            `json:"reason"`
	Failed         int               `json:"failed"`
	ErrorBudget    *ErrorBudget      `json:"error_budget"`
	BudgetFailures *int              `json:"budget_failures"`
	Failures       []CampaignFailure `json:"failures"`
}

// CampaignFailure is one failed attempt of a campaign item.
type CampaignFailure struct {
	Item    int    `json:"item"`
	Attempt int    `json:"attempt"`
	UID     string `json:"uid"`
	// Cause is "failure" or "lease_expired".
	Cause  string          `json:"cause"`
	Final  bool            `json:"final"`
	Detail json.RawMessage `json:"detail"`
	At     time.Time       `json:"at,omitzero"`
}

// Artifact is a software artifact DDI devices download.
type Artifact struct {
	ID       int64  `json:"id"`
	Filename string `json:"filename"`
	Size     int64  `json:"size"`
	Hashes   struct {
		SHA1   string `json:"sha1"`
		MD5    string `json:"md5"`
		SHA256 string `json:"sha256"`
	} `json:"hashes"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// AuditEntry is one admin write.
type AuditEntry struct {
	At     time.Time       `json:"at,omitzero"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// Overview is the dispatch system at a glance.
type Overview struct {
	DueNow         int       `json:"due_now"`
	DueNextHour    int       `json:"due_next_hour"`
	OpenDispatches int       `json:"open_dispatches"`
	RetryWaiting   int       `json:"retry_waiting"`
	Dead           int       `json:"dead"`
	OutboxPending  int       `json:"outbox_pending"`
	OutboxOldestAt time.Time `json:"outbox_oldest_at,omitzero"`
}

// Node is a server node that reported in.
type Node struct {
	Node      string    `json:"node"`
	StartedAt time.Time `json:"started_at,omitzero"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
	Roles     []string  `json:"roles"`
}
