package taskd

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Campaigns (seed 000): a batch of items (N numbered ones, or a list of uids) worked
// by the executor's agents through fetch, at a set rate. Progress is a sliding window:
// an offset below which every item is finished, and at most Window items above it
// handed out or finished; a failed item waits out its backoff on its own while the
// window moves on.

// CampaignState is where a campaign is in its life:
//
//	created -> running -> paused -> running (resume)
//	running, paused -> stopping -> stopped -> running (start again)
//	running -> finished (every item finished)
//
// The error budget moves a running campaign to paused, with the reason.
type CampaignState string

const (
	CampaignCreated  CampaignState = "created"
	CampaignRunning  CampaignState = "running"
	CampaignPaused   CampaignState = "paused"
	CampaignStopping CampaignState = "stopping"
	CampaignStopped  CampaignState = "stopped"
	CampaignFinished CampaignState = "finished"
)

// CampaignMove is an admin's move of a campaign's state.
type CampaignMove string

const (
	MoveStart  CampaignMove = "start"
	MovePause  CampaignMove = "pause"
	MoveResume CampaignMove = "resume"
	MoveStop   CampaignMove = "stop"
)

// Apply returns the state the move leads to from s, or a conflict when s does not
// allow it.
func (m CampaignMove) Apply(s CampaignState) (CampaignState, error) {
	to, ok := map[CampaignMove]map[CampaignState]CampaignState{
		MoveStart:  {CampaignCreated: CampaignRunning, CampaignStopped: CampaignRunning},
		MovePause:  {CampaignRunning: CampaignPaused},
		MoveResume: {CampaignPaused: CampaignRunning},
		MoveStop:   {CampaignRunning: CampaignStopping, CampaignPaused: CampaignStopping},
	}[m][s]
	if !ok {
		return s, Errorf(CodeConflict, "cannot %s a campaign that is %s", m, s)
	}
	return to, nil
}

// Campaign item sources.
const (
	ItemsCount = "count" // items 0..Total-1
	ItemsUIDs  = "uids"  // a list of uids, given at create or uploaded before the start
)

// ErrorBudget pauses a running campaign when more than MaxFailures of its items fail
// (a failure result, or a lease running out) within PerSeconds.
type ErrorBudget struct {
	MaxFailures int `json:"max_failures"`
	PerSeconds  int `json:"per_seconds"`
}

// Campaign limits.
const (
	MaxCampaignItems  = 1_000_000_000
	MaxCampaignWindow = 100_000
	MaxCampaignRate   = 100_000
	// MaxInlineUIDs bounds the uids of a create request; more are uploaded.
	MaxInlineUIDs = 10_000
)

// Campaign is a campaign as the admin API shows it. Offset, Done, Failed and InFlight
// are live (read from Redis) where the server could, else as last synced to MySQL.
type Campaign struct {
	ID            int64           `json:"id"`
	Name          string          `json:"name"`
	TemplateID    int64           `json:"template_id"`
	Params        json.RawMessage `json:"params"`
	Executor      string          `json:"executor"`
	Items         string          `json:"items"`
	Total         int64           `json:"total"`
	RatePerSecond float64         `json:"rate_per_second"`
	Window        int             `json:"window"`
	ErrorBudget   *ErrorBudget    `json:"error_budget"`
	LeaseSeconds  int             `json:"lease_seconds"`
	MaxAttempts   int             `json:"max_attempts"`
	// RetryBackoffSeconds is how long a failed item waits before it is handed out again.
	RetryBackoffSeconds int `json:"retry_backoff_seconds"`
	// Windows are the campaign's maintenance windows: its items are handed out only
	// while one is open (an item handed out may run and finish after it closes).
	Windows    Windows       `json:"windows,omitempty"`
	State      CampaignState `json:"state"`
	Reason     string        `json:"reason"`
	Offset     int64         `json:"offset"`
	Done       int64         `json:"done"`
	Failed     int64         `json:"failed"`
	InFlight   int64         `json:"in_flight"`
	CreatedAt  time.Time     `json:"created_at"`
	UpdatedAt  time.Time     `json:"updated_at"`
	StartedAt  *time.Time    `json:"started_at"`
	FinishedAt *time.Time    `json:"finished_at"`
	// Epoch counts the admin's moves: a move made in MySQL reaches Redis with its epoch,
	// and a state Redis reached on its own (error budget, finished) is taken into MySQL
	// only while the epochs agree.
	Epoch int64 `json:"-"`
	// FinishedAbove are the finished items at or above Offset, as last synced.
	FinishedAbove []int64 `json:"-"`
	// Salt keys the tag in its items' log ids (CampaignLog.UIDTag): only the user a
	// handout went to can name it.
	Salt string `json:"-"`
}

// Version is c's version, the ETag of its reads and moves: its epoch, state and total.
// Its progress moves on its own every second and is nobody's edit, so it is not part of
// it (see version.go).
func (c Campaign) Version() Version {
	return Version(strconv.FormatInt(c.Epoch, 10) + "-" + string(c.State) + "-" + strconv.FormatInt(c.Total, 10))
}

// CampaignFailure is one failure of a campaign item: a failure result (Cause
// "failure", with the agent's detail) or a lease that ran out ("lease_expired"). Final
// says the item failed for good (its last attempt, or a failure its agent said was
// final: "retry": false); else it is retried. The error budget counts both causes,
// final or not.
type CampaignFailure struct {
	Item    int64           `json:"item"`
	Attempt int             `json:"attempt"`
	UID     string          `json:"uid"`
	Cause   string          `json:"cause"`
	Final   bool            `json:"final"`
	Detail  json.RawMessage `json:"detail"`
	At      time.Time       `json:"at"`
}

// Progress is a campaign's window as Redis keeps it (and MySQL, synced).
type CampaignProgress struct {
	State    CampaignState
	Reason   string
	Epoch    int64
	Offset   int64
	Next     int64
	Done     int64
	Failed   int64
	InFlight int64
	// Finished are the items at or above Offset that are finished (done or failed for
	// good): at most the window.
	Finished []int64
}

// CampaignTaskID is the task_id a campaign's items carry in a fetch.
func CampaignTaskID(id int64) string { return "campaign:" + strconv.FormatInt(id, 10) }

// CampaignLog identifies one handout of a campaign item: its log id is
// "cmp-<campaign>-<item>-<attempt>-<uid tag>".
type CampaignLog struct {
	Campaign int64
	Item     int64
	Attempt  int
	UIDTag   string
}

// campaignLogPrefix starts every campaign item's log id (a dispatch's is a UUID).
const campaignLogPrefix = "cmp-"

// IsCampaignLog reports whether a log id names a campaign item's handout.
func IsCampaignLog(logID string) bool { return strings.HasPrefix(logID, campaignLogPrefix) }

func (l CampaignLog) String() string {
	return fmt.Sprintf("%s%d-%d-%d-%s", campaignLogPrefix, l.Campaign, l.Item, l.Attempt, l.UIDTag)
}

// ParseCampaignLog parses a campaign item's log id; ok is false for anything else.
func ParseCampaignLog(logID string) (CampaignLog, bool) {
	rest, ok := strings.CutPrefix(logID, campaignLogPrefix)
	if !ok {
		return CampaignLog{}, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 4 || parts[3] == "" {
		return CampaignLog{}, false
	}
	var l CampaignLog
	var err1, err2, err3 error
	l.Campaign, err1 = strconv.ParseInt(parts[0], 10, 64)
	l.Item, err2 = strconv.ParseInt(parts[1], 10, 64)
	l.Attempt, err3 = strconv.Atoi(parts[2])
	l.UIDTag = parts[3]
	if err1 != nil || err2 != nil || err3 != nil || l.Campaign < 1 || l.Item < 0 || l.Attempt < 1 {
		return CampaignLog{}, false
	}
	return l, true
}

// CampaignItem is one item handed to an agent.
type CampaignItem struct {
	Log        CampaignLog
	Campaign   *Campaign
	Item       any // the index (count) or the uid (uids)
	Redo       bool
	LeaseUntil time.Time
	Checkpoint json.RawMessage
}
