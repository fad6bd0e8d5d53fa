package agent_test

// The client API's contract suite (agent/internal/contract), run against agenttest's
// fake and against a real dispatchd: the fake must answer as the server does.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskpull/taskd/agent/agenttest"
	"github.com/taskpull/taskd/agent/internal/contract"
	"github.com/taskpull/taskd/agent/internal/wire"
	"github.com/taskpull/taskd/internal/app"
)

func TestContractFake(t *testing.T) {
	t.Parallel()
	limited := newFakeContract(t)
	limited.s.Inject(agenttest.Fault{On: agenttest.Fetch, Status: 429, RetryAfter: time.Second})
	contract.Run(t, contract.Servers{Plain: newFakeContract(t), Limited: limited})
}

func TestContractDispatchd(t *testing.T) {
	t.Parallel()
	plain := startDispatchd(t, nil, nil)
	limited := startDispatchd(t, func(c *app.Config) { c.PollRate, c.PollBurst = 0.5, 1 }, nil)
	contract.Run(t, contract.Servers{Plain: realContract{plain}, Limited: realContract{limited}})
}

// fakeContract is agenttest's fake as the suite's Server.
type fakeContract struct {
	s         *agenttest.Server
	templates sync.Map     // id -> contract.Template
	seq       atomic.Int64 // template and campaign ids
}

func newFakeContract(t *testing.T) *fakeContract { return &fakeContract{s: fakeServer(t)} }

func (f *fakeContract) URL() string                         { return f.s.URL }
func (f *fakeContract) EnrollSecret() string                { return f.s.EnrollSecret }
func (f *fakeContract) Key(t *testing.T, uid string) string { return f.s.Key(uid) }
func (f *fakeContract) Revoke(t *testing.T, uid string)     { f.s.Revoke(uid) }

func (f *fakeContract) SetMaxInFlight(t *testing.T, uid string, n int) { f.s.SetMaxInFlight(uid, n) }

func (f *fakeContract) Template(t *testing.T, tpl contract.Template) int64 {
	id := f.seq.Add(1)
	f.templates.Store(id, tpl)
	return id
}

func (f *fakeContract) task(uid string, tpl int64, params any) agenttest.Task {
	v, _ := f.templates.Load(tpl)
	s, _ := v.(contract.Template)
	return agenttest.Task{UID: uid, TemplateID: tpl, Params: params, LeaseSeconds: s.LeaseSeconds, MaxAttempts: s.MaxAttempts,
		Stages: s.Stages}
}

func (f *fakeContract) Add(t *testing.T, uid string, tpl int64, params any) string {
	return f.s.Add(f.task(uid, tpl, params))
}

func (f *fakeContract) Campaign(t *testing.T, uid string, tpl int64, count int) int64 {
	id := f.seq.Add(1)
	for i := range count {
		task := f.task(uid, tpl, nil)
		task.CampaignID, task.Item, task.LeaseSeconds = id, i, 60
		f.s.Add(task)
	}
	return id
}

func (f *fakeContract) Expire(t *testing.T, logID string) {
	if !f.s.Expire(logID) {
		t.Fatalf("expire %s: not open", logID)
	}
}

func (f *fakeContract) Agent(t *testing.T, uid string) (wire.Agent, bool) {
	a, ok := f.s.Agent(uid)
	return wire.Agent{Version: a.Version, Hostname: a.Hostname, Labels: a.Labels}, ok
}

// realContract is a dispatchd as the suite's Server, its admin calls reporting to the
// case's t.
type realContract struct{ d *dispatchd }

func (r realContract) on(t *testing.T) *dispatchd {
	d := *r.d
	d.t = t
	return &d
}

func (r realContract) URL() string          { return r.d.URL }
func (r realContract) EnrollSecret() string { return r.d.cfg.EnrollSecret }

func (r realContract) Key(t *testing.T, uid string) string { return r.on(t).key(uid) }

func (r realContract) Revoke(t *testing.T, uid string) {
	r.on(t).admin("DELETE", "/v1/admin/clients/"+uid+"/keys", nil)
}

func (r realContract) SetMaxInFlight(t *testing.T, uid string, n int) {
	r.on(t).admin("PUT", "/v1/admin/clients/"+uid, map[string]any{"max_in_flight": n})
}

func (r realContract) Template(t *testing.T, tpl contract.Template) int64 {
	fields := map[string]any{"retry_backoff_seconds": 0}
	if tpl.LeaseSeconds > 0 {
		fields["lease_seconds"] = tpl.LeaseSeconds
	}
	if tpl.MaxAttempts > 0 {
		fields["max_attempts"] = tpl.MaxAttempts
	}
	if len(tpl.Stages) > 0 {
		fields["stages"] = tpl.Stages
	}
	return r.on(t).template(fields)
}

func (r realContract) Add(t *testing.T, uid string, tpl int64, params any) string {
	var fields map[string]any
	if params != nil {
		fields = map[string]any{"params": params}
	}
	return r.on(t).task(uid, tpl, fields)
}

func (r realContract) Campaign(t *testing.T, uid string, tpl int64, count int) int64 {
	d := r.on(t)
	c := d.admin("POST", "/v1/admin/campaigns", map[string]any{"name": "contract", "template_id": tpl, "params": map[string]any{},
		"executor": "uid_" + uid, "items": map[string]any{"count": count}, "rate_per_second": 1000, "lease_seconds": 60})
	id := int64(c["id"].(float64))
	d.admin("POST", fmt.Sprintf("/v1/admin/campaigns/%d/start", id), nil)
	return id
}

func (r realContract) Expire(t *testing.T, logID string) {
	r.on(t).admin("POST", "/v1/admin/dispatches/"+logID+"/expire", nil)
}

func (r realContract) Agent(t *testing.T, uid string) (wire.Agent, bool) {
	c, ok := r.on(t).listed(uid)
	if !ok || c.Agent == nil {
		return wire.Agent{}, false
	}
	return *c.Agent, true
}
