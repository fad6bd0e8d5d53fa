package client

import (
	"context"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Groups lists the groups, hand-kept and dynamic, with their member and task counts.
func (cl *Client) Groups(ctx context.Context) iter.Seq2[Group, error] {
	return list[Group](cl, ctx, "/v1/admin/groups", Filter{}, "groups")
}

// Group reads a group.
func (cl *Client) Group(ctx context.Context, gid string) (Group, error) {
	return send[Group](cl, ctx, http.MethodGet, "/v1/admin/groups/"+esc(gid), nil, false, nil)
}

// SetGroupRule makes a group dynamic: its members are the agents whose labels match
// selector (Kubernetes' label selector syntax) and whose version matches
// agentVersion (a semantic-version constraint); either may be empty.
func (cl *Client) SetGroupRule(ctx context.Context, gid, selector, agentVersion string) (Group, error) {
	body := map[string]string{}
	if selector != "" {
		body["selector"] = selector
	}
	if agentVersion != "" {
		body["agent_version"] = agentVersion
	}
	return send[Group](cl, ctx, http.MethodPut, "/v1/admin/groups/"+esc(gid), body, false, nil)
}

// DeleteGroup deletes a group: its members, or its rule.
func (cl *Client) DeleteGroup(ctx context.Context, gid string) error {
	_, err := send[struct{}](cl, ctx, http.MethodDelete, "/v1/admin/groups/"+esc(gid), nil, false, nil)
	return err
}

// GroupMembers lists a group's members.
func (cl *Client) GroupMembers(ctx context.Context, gid string) ([]string, error) {
	out, err := send[members](cl, ctx, http.MethodGet, membersPath(gid), nil, false, nil)
	return out.UIDs, err
}

// SetGroupMembers makes uids a hand-kept group's members, and answers them.
func (cl *Client) SetGroupMembers(ctx context.Context, gid string, uids []string) ([]string, error) {
	out, err := send[members](cl, ctx, http.MethodPut, membersPath(gid), members{nonNil(uids)}, false, nil)
	return out.UIDs, err
}

// AddGroupMembers adds uids to a hand-kept group, and answers its members.
func (cl *Client) AddGroupMembers(ctx context.Context, gid string, uids []string) ([]string, error) {
	out, err := send[members](cl, ctx, http.MethodPost, membersPath(gid), members{nonNil(uids)}, false, nil)
	return out.UIDs, err
}

// RemoveGroupMember removes uid from a hand-kept group.
func (cl *Client) RemoveGroupMember(ctx context.Context, gid, uid string) error {
	_, err := send[struct{}](cl, ctx, http.MethodDelete, membersPath(gid)+"/"+esc(uid), nil, false, nil)
	return err
}

type members struct {
	UIDs []string `json:"uids"`
}

func membersPath(gid string) string { return "/v1/admin/groups/" + esc(gid) + "/members" }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Clients lists the fleet: the uids the server knows, with what their agents last
// said of themselves. Filter's Group, Labels, Selector, AgentVersion, SeenBefore and
// SeenAfter narrow it.
func (cl *Client) Clients(ctx context.Context, f Filter) iter.Seq2[ClientInfo, error] {
	return list[ClientInfo](cl, ctx, "/v1/admin/clients", f, "clients",
		"group", "label", "selector", "agent_version", "seen_before", "seen_after")
}

// ClientInfo reads a uid's settings and state.
func (cl *Client) ClientInfo(ctx context.Context, uid string) (ClientInfo, error) {
	return send[ClientInfo](cl, ctx, http.MethodGet, "/v1/admin/clients/"+esc(uid), nil, false, nil)
}

// SetMaxInFlight sets how many dispatches uid may hold open at once (0: the
// server's default).
func (cl *Client) SetMaxInFlight(ctx context.Context, uid string, n int, opts ...Option) (ClientInfo, error) {
	return send[ClientInfo](cl, ctx, http.MethodPut, "/v1/admin/clients/"+esc(uid),
		map[string]int{"max_in_flight": n}, false, opts)
}

// IssueKey issues a new client key for uid (the uid's other keys stay valid) and
// answers it. It sends an Idempotency-Key, so a retry answers the same key rather than
// issuing another; the server keeps the key's hash, and for 24 hours the reply sealed
// with the Idempotency-Key, which it keeps only a hash of.
func (cl *Client) IssueKey(ctx context.Context, uid string, opts ...Option) (string, error) {
	out, err := send[struct {
		Key string `json:"client_key"`
	}](cl, ctx, http.MethodPost, "/v1/admin/clients/"+esc(uid)+"/keys", nil, true, opts)
	return out.Key, err
}

// RevokeKeys revokes every key of uid and answers how many there were.
func (cl *Client) RevokeKeys(ctx context.Context, uid string) (int, error) {
	out, err := send[struct {
		Revoked int `json:"revoked"`
	}](cl, ctx, http.MethodDelete, "/v1/admin/clients/"+esc(uid)+"/keys", nil, false, nil)
	return out.Revoked, err
}

// Nodes lists the server nodes that reported in lately.
func (cl *Client) Nodes(ctx context.Context) ([]Node, error) {
	out, err := send[struct {
		Nodes []Node `json:"nodes"`
	}](cl, ctx, http.MethodGet, "/v1/admin/nodes", nil, false, nil)
	return out.Nodes, err
}

// Dispatches lists dispatch records, newest first; Filter's UID, TaskID, State, From
// and To narrow it.
func (cl *Client) Dispatches(ctx context.Context, f Filter) iter.Seq2[Dispatch, error] {
	return list[Dispatch](cl, ctx, "/v1/admin/dispatches", f, "dispatches", "uid", "task_id", "state", "from", "to")
}

// ExpireDispatch ends an open dispatch's lease now: it goes back to the pool (or is
// dead, with no attempts left).
func (cl *Client) ExpireDispatch(ctx context.Context, logID string) (Dispatch, error) {
	return cl.intervene(ctx, logID, "expire")
}

// RetryDispatch sends a dead dispatch back for another attempt.
func (cl *Client) RetryDispatch(ctx context.Context, logID string) (Dispatch, error) {
	return cl.intervene(ctx, logID, "retry")
}

// CancelDispatch ends a dispatch for good.
func (cl *Client) CancelDispatch(ctx context.Context, logID string) (Dispatch, error) {
	return cl.intervene(ctx, logID, "cancel")
}

func (cl *Client) intervene(ctx context.Context, logID, move string) (Dispatch, error) {
	return send[Dispatch](cl, ctx, http.MethodPost, "/v1/admin/dispatches/"+esc(logID)+"/"+move, nil, false, nil)
}

// Events lists the events, newest first; Filter's UID, TaskID, Type, From and To
// narrow it.
func (cl *Client) Events(ctx context.Context, f Filter) iter.Seq2[Event, error] {
	return list[Event](cl, ctx, "/v1/admin/events", f, "events", "uid", "task_id", "type", "from", "to")
}

// Audit lists the admins' writes, newest first; Filter's From and To narrow it.
func (cl *Client) Audit(ctx context.Context, f Filter) iter.Seq2[AuditEntry, error] {
	return list[AuditEntry](cl, ctx, "/v1/admin/audit", f, "entries", "from", "to")
}

// Stats answers each task's figures over [from, to) (zero: unbounded).
func (cl *Client) Stats(ctx context.Context, from, to time.Time) ([]TaskStats, error) {
	out, err := rangeRead[struct {
		Tasks []TaskStats `json:"tasks"`
	}](cl, ctx, "/v1/admin/stats", from, to)
	return out.Tasks, err
}

// AgentStats answers the figures by agent version over [from, to) (zero: unbounded).
func (cl *Client) AgentStats(ctx context.Context, from, to time.Time) ([]VersionStats, error) {
	out, err := rangeRead[struct {
		Versions []VersionStats `json:"versions"`
	}](cl, ctx, "/v1/admin/stats/agents", from, to)
	return out.Versions, err
}

// Overview answers the dispatch system at a glance.
func (cl *Client) Overview(ctx context.Context) (Overview, error) {
	return send[Overview](cl, ctx, http.MethodGet, "/v1/admin/overview", nil, false, nil)
}

func rangeRead[T any](cl *Client, ctx context.Context, path string, from, to time.Time) (T, error) {
	var out T
	q, err := Filter{From: from, To: to}.query("from", "to")
	if err != nil {
		return out, err
	}
	c := newCall(http.MethodGet, path, nil)
	c.query = q
	return out, cl.do(ctx, c, &out)
}

// Artifacts lists the software artifacts, newest first.
func (cl *Client) Artifacts(ctx context.Context) iter.Seq2[Artifact, error] {
	return list[Artifact](cl, ctx, "/v1/admin/artifacts", Filter{}, "artifacts")
}

// Artifact reads an artifact.
func (cl *Client) Artifact(ctx context.Context, id int64) (Artifact, error) {
	return send[Artifact](cl, ctx, http.MethodGet, artifactPath(id), nil, false, nil)
}

// DeleteArtifact deletes an artifact no task uses.
func (cl *Client) DeleteArtifact(ctx context.Context, id int64) error {
	_, err := send[struct{}](cl, ctx, http.MethodDelete, artifactPath(id), nil, false, nil)
	return err
}

// UploadArtifact uploads body as an artifact called filename, streamed. It sends an
// Idempotency-Key (a random one unless given): an upload refused by a rate limit
// (429) is sent again if body is an io.Seeker, and calling it again with the same
// key and bytes keeps one artifact.
func (cl *Client) UploadArtifact(ctx context.Context, filename string, body io.Reader, opts ...Option) (Artifact, error) {
	c := newCall(http.MethodPost, "/v1/admin/artifacts", opts)
	c.create = true
	c.query = url.Values{"filename": {filename}}
	c.stream = body
	c.header.Set("Content-Type", "application/octet-stream")
	var out Artifact
	return out, cl.do(ctx, c, &out)
}

func artifactPath(id int64) string { return "/v1/admin/artifacts/" + strconv.FormatInt(id, 10) }
