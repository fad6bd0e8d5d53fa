package logsink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/elastic/elastic-transport-go/v8/elastictransport"
	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/google/uuid"

	"github.com/taskpull/taskd"
	esdeploy "github.com/taskpull/taskd/deploy/elasticsearch"
)

// newESTransport returns the transport of every call the sink makes to the search
// server. It is elastictransport's client used directly rather than through
// elasticsearch.Client, which refuses any server whose answers lack the header
// "X-Elastic-Product: Elasticsearch": OpenSearch and Elasticsearch before 7.14 among
// them. The sink needs only the bulk, template and lifecycle endpoints, which those
// servers speak.
func newESTransport(cfg Config) (*elastictransport.Client, error) {
	urls := make([]*url.URL, len(cfg.ESURLs))
	for i, s := range cfg.ESURLs {
		u, err := url.Parse(strings.TrimRight(s, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("DISPATCH_ES_URLS: %q is not an http(s) URL", redactURL(s))
		}
		urls[i] = u
	}
	return elastictransport.New(elastictransport.Config{
		UserAgent: "taskd-logsink",
		URLs:      urls,
		Username:  cfg.ESUsername,
		Password:  cfg.ESPassword,
		// The transport retries a request a few times at once; past that the sink's
		// own backoff takes over, without limit.
		RetryOnStatus: []int{http.StatusTooManyRequests, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout},
		MaxRetries: 3,
		RetryBackoff: func(attempt int) time.Duration {
			return retryDelay(attempt, cfg.RetryMin, min(cfg.RetryMax, 2*time.Second))
		},
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			ResponseHeaderTimeout: 2 * time.Minute,
			MaxIdleConnsPerHost:   cfg.Workers + 2,
			IdleConnTimeout:       90 * time.Second,
		},
	})
}

// redactURL drops credentials from a URL for an error message.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	u.User = nil
	return u.String()
}

// esSetup installs, idempotently, what the sink's indices need: the lifecycle policy
// named prefix that deletes them after the retention period, then the index template
// named prefix with their mappings. A step the server answers with an error that
// retrying cannot mend (it has no such endpoint, refuses a setting, denies the user)
// is skipped with one warning that says what the operator goes without; a step that
// fails for the moment (no answer, 429, 5xx) is retried with backoff until it
// succeeds or the sink stops.
//
// A template the server took is then proven before the sink relies on it: setup
// indexes a real event document into a scratch index made from it, and deletes that
// index. A server that refuses the event gets a plainer mapping (dates as keywords,
// then none), with one warning naming what was dropped.
type esSetup struct {
	api           *esapi.API
	prefix        string
	retentionDays int
	log           *slog.Logger
	backoff       backoff
	// warnf logs a retry, at most every few seconds.
	warnf func(msg string, args ...any)
	// now stamps the probe event.
	now func() time.Time
}

// setupReport says what setup installed.
type setupReport struct {
	Policy bool // the lifecycle policy
	// Template is the index template installed: "" none, else a description.
	Template string
	// Proven says the server stored an event under the template.
	Proven bool
}

// run performs every step; it returns early only when ctx ends.
func (e *esSetup) run(ctx context.Context) (setupReport, error) {
	var rep setupReport
	pol, err := esdeploy.LifecyclePolicy(e.retentionDays)
	if err != nil {
		return rep, err
	}
	ans, err := e.step(ctx, "lifecycle policy "+e.prefix, func() (*esapi.Response, error) {
		return e.api.ILM.PutLifecycle(e.prefix, e.api.ILM.PutLifecycle.WithBody(bytes.NewReader(pol)),
			e.api.ILM.PutLifecycle.WithContext(ctx))
	})
	if err != nil {
		return rep, err
	}
	if rep.Policy = ans.ok; !rep.Policy {
		e.log.Warn("elasticsearch setup: lifecycle policy not installed; no retention: indices "+e.prefix+
			"-* are never deleted (delete old ones yourself, or with the server's own tool, e.g. an OpenSearch ISM policy)",
			"status", ans.status, "reason", ans.reason)
	}

	// The richest template the server takes: each variant drops one thing some
	// servers refuse.
	var refusals []string
	for _, v := range templateVariants(rep.Policy, e.prefix) {
		tpl, err := esdeploy.IndexTemplate(e.prefix, v.opt)
		if err != nil {
			return rep, err
		}
		ans, err := e.step(ctx, "index template "+e.prefix, func() (*esapi.Response, error) {
			return e.api.Indices.PutIndexTemplate(e.prefix, bytes.NewReader(tpl),
				e.api.Indices.PutIndexTemplate.WithContext(ctx))
		})
		if err != nil {
			return rep, err
		}
		if ans.ok {
			rep.Template = v.describe()
			if v.loses != "" {
				e.log.Warn("elasticsearch setup: index template installed without what the server refused; "+v.loses,
					"installed", v.describe(), "refused", strings.Join(refusals, "; "))
			}
			return rep, e.proveMappings(ctx, v, &rep)
		}
		refusals = append(refusals, fmt.Sprintf("%d %s", ans.status, ans.reason))
		if !ans.bodyRefused() {
			break // no such endpoint, or not allowed: a smaller body will not help
		}
	}
	e.log.Warn("elasticsearch setup: index template not installed; new indices "+e.prefix+
		"-* get dynamic mappings (text fields where the Kibana objects expect keywords); "+
		"install deploy/elasticsearch/index-template.json by hand (see the README)",
		"refused", strings.Join(refusals, "; "))
	return rep, nil
}

// templateVariant is one index template body to try, and what the operator goes
// without when it is the one the server takes.
type templateVariant struct {
	opt   esdeploy.TemplateOptions
	loses string
}

// templateVariants lists the template bodies to try, richest first: with the link to
// the lifecycle policy (when it is installed) and the _meta block, then without each.
func templateVariants(withPolicy bool, policy string) []templateVariant {
	const noMeta = "the template carries no _meta description (harmless)"
	if !withPolicy {
		return []templateVariant{{esdeploy.TemplateOptions{Meta: true}, ""}, {esdeploy.TemplateOptions{}, noMeta}}
	}
	const noPolicy = "new indices are not attached to the lifecycle policy, so they are never deleted"
	return []templateVariant{
		{esdeploy.TemplateOptions{Policy: policy, Meta: true}, ""},
		{esdeploy.TemplateOptions{Policy: policy}, noMeta},
		{esdeploy.TemplateOptions{Meta: true}, noPolicy},
		{esdeploy.TemplateOptions{}, noPolicy},
	}
}

func (v templateVariant) describe() string {
	d := "mappings"
	switch v.opt.Mappings {
	case esdeploy.DatesAsKeywords:
		d = "mappings (dates as keyword)"
	case esdeploy.NoMappings:
		d = "no mappings"
	}
	if v.opt.Policy != "" {
		d += ", lifecycle policy"
	}
	if v.opt.Meta {
		d += ", _meta"
	}
	return d
}

// putTemplate installs the index template of variant v.
func (e *esSetup) putTemplate(ctx context.Context, v templateVariant) (answer, error) {
	tpl, err := esdeploy.IndexTemplate(e.prefix, v.opt)
	if err != nil {
		return answer{}, err
	}
	return e.step(ctx, "index template "+e.prefix, func() (*esapi.Response, error) {
		return e.api.Indices.PutIndexTemplate(e.prefix, bytes.NewReader(tpl),
			e.api.Indices.PutIndexTemplate.WithContext(ctx))
	})
}

// mappingLevels are the mappings to try, richest first.
var mappingLevels = []esdeploy.Mappings{esdeploy.FullMappings, esdeploy.DatesAsKeywords, esdeploy.NoMappings}

// proveMappings proves the installed template of variant v with an event, and falls
// back to a plainer mapping while the server refuses the event. When it refuses the
// event under every mapping, the mappings are not what it refuses: the full ones are
// put back, and the events will wait (readiness es_incompatible) until the server or
// the template is fixed.
func (e *esSetup) proveMappings(ctx context.Context, v templateVariant, rep *setupReport) error {
	var refusals []string
	for i, m := range mappingLevels {
		v.opt.Mappings = m
		if i > 0 {
			ans, err := e.putTemplate(ctx, v)
			if err != nil {
				return err
			}
			if !ans.ok {
				refusals = append(refusals, fmt.Sprintf("template with %s: %d %s", v.describe(), ans.status, ans.reason))
				continue
			}
		}
		p, err := e.prove(ctx)
		if err != nil {
			return err
		}
		switch {
		case p.unknown != "":
			e.log.Warn("elasticsearch setup: index template installed but not proven: the server did not take the probe event "+
				"for a reason no mapping can mend", "installed", v.describe(), "reason", p.unknown)
			rep.Template = v.describe()
			return nil
		case p.refused == nil:
			rep.Template, rep.Proven = v.describe(), true
			if m != esdeploy.FullMappings {
				e.log.Warn("elasticsearch setup: the server refused an event under the index template's mappings; "+
					"installed a plainer mapping without "+m.Dropped(),
					"installed", v.describe(), "dropped", m.Dropped(), "refused", strings.Join(refusals, "; "))
			}
			return nil
		}
		refusals = append(refusals, fmt.Sprintf("with %s: %s", v.describe(), p.refused))
	}
	plainest := v.describe()
	v.opt.Mappings = esdeploy.FullMappings
	ans, err := e.putTemplate(ctx, v)
	if err != nil {
		return err
	}
	rep.Template = v.describe()
	if !ans.ok {
		rep.Template = plainest
	}
	e.log.Warn("elasticsearch setup: the server refused the probe event under every mapping, the plainest included, "+
		"so the mappings are not what it refuses; the full mappings stay installed, and events will wait in Kafka "+
		"(readiness es_incompatible) until the server or the template is fixed",
		"installed", rep.Template, "refused", strings.Join(refusals, "; "))
	return nil
}

// proof is what the probe event got: stored (neither field set), refused, or unknown:
// a refusal that is not about the documents (401, 403, 404: no right to create or
// write the scratch index, say), which leaves the template unproven.
type proof struct {
	refused *refusal
	unknown string
}

// prove indexes a real event document, in one bulk request as the sink sends events,
// into a scratch index named prefix-setup-probe-<random> (so made from the template),
// then deletes that index. A transient failure is retried with backoff.
func (e *esSetup) prove(ctx context.Context) (proof, error) {
	ev := probeEvent(e.now())
	src, err := json.Marshal(ev)
	if err != nil {
		return proof{}, err
	}
	scratch := e.prefix + "-setup-probe-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	doc := []bulkDoc{{index: scratch, id: ev.EventID, source: src}}
	defer e.dropScratch(ctx, scratch)
	e.backoff.reset()
	for {
		ans := sendBulk(ctx, e.api, doc)
		switch {
		case ans.whole != nil:
			return proof{refused: ans.whole}, nil
		case ans.err == nil && ans.items[0].stored:
			return proof{}, nil
		case ans.err == nil && ans.items[0].refused != nil:
			return proof{refused: ans.items[0].refused}, nil
		case ans.err != nil && ans.status >= 400 && ans.status < 500 &&
			ans.status != http.StatusRequestTimeout && ans.status != http.StatusTooManyRequests:
			return proof{unknown: ans.err.Error()}, nil
		}
		if ctx.Err() != nil {
			return proof{}, ctx.Err()
		}
		reason := "the item was not stored"
		if ans.err != nil {
			reason = ans.err.Error()
		}
		e.warnf("elasticsearch setup: probe event not stored; retrying", "reason", reason)
		sleep(ctx, e.backoff.next())
	}
}

// dropScratch deletes the probe's scratch index; one that was never created is fine.
// An index left behind is deleted by the lifecycle policy, where there is one.
func (e *esSetup) dropScratch(ctx context.Context, index string) {
	ans, err := e.step(ctx, "scratch index "+index, func() (*esapi.Response, error) {
		return e.api.Indices.Delete([]string{index}, e.api.Indices.Delete.WithContext(ctx))
	})
	if err == nil && !ans.ok && ans.status != http.StatusNotFound {
		e.log.Warn("elasticsearch setup: scratch index not deleted; delete it by hand", "index", index,
			"status", ans.status, "reason", ans.reason)
	}
}

// probeEvent is a real event document, every field set as the dispatch path sets it
// (times in UTC with microseconds), that no query mistakes for a dispatch.
func probeEvent(now time.Time) taskd.Event {
	at := now.UTC().Truncate(time.Microsecond)
	latency := int64(12)
	return taskd.Event{
		EventID: "setup-probe-" + uuid.NewString(), Type: taskd.EventDispatch, LogID: "setup-probe",
		UID: "setup-probe", TaskID: "setup-probe", Kind: "once", DueAt: at.Add(-time.Minute), Attempt: 1,
		Result: "ok", Stage: "probe", LatencyMS: &latency, Final: true, Node: "logsink", At: at,
	}
}

// answer is the outcome of one setup call.
type answer struct {
	ok        bool
	transient bool // worth trying again
	status    int  // 0: no answer
	reason    string
}

// bodyRefused reports whether the server refused what was sent rather than the call
// itself: a 400 or 422 (an unknown setting or field), not a 404/405 (no such
// endpoint) or a 401/403 (not allowed).
func (a answer) bodyRefused() bool {
	return a.status == http.StatusBadRequest || a.status == http.StatusUnprocessableEntity
}

// step makes a call until it gets an answer that is not transient.
func (e *esSetup) step(ctx context.Context, what string, call func() (*esapi.Response, error)) (answer, error) {
	e.backoff.reset()
	for {
		ans := classifySetup(call())
		if !ans.transient {
			return ans, nil
		}
		if ctx.Err() != nil {
			return ans, ctx.Err()
		}
		e.warnf("elasticsearch setup: "+what+" failed; retrying", "status", ans.status, "reason", ans.reason)
		sleep(ctx, e.backoff.next())
	}
}

// classifySetup sorts the answer to a setup call: success; a refusal retrying cannot
// mend (any 4xx but 408 and 429); or a transient failure (no answer, 408, 429, 5xx).
func classifySetup(res *esapi.Response, err error) answer {
	if err != nil {
		return answer{transient: true, reason: err.Error()}
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	a := answer{status: res.StatusCode}
	switch st := res.StatusCode; {
	case st >= 200 && st < 300:
		a.ok = true
		return a
	case st == http.StatusRequestTimeout, st == http.StatusTooManyRequests, st >= 500:
		a.transient = true
	}
	a.reason = errorReason(body)
	return a
}

// errorReason is the server's explanation in an error body: Elasticsearch's
// {"error":{"type":…,"reason":…}}, the older {"error":"no handler found…"}, or the start
// of whatever else it sent.
func errorReason(body []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && len(e.Error) > 0 {
		var s string
		if json.Unmarshal(e.Error, &s) == nil {
			return s
		}
		var obj struct{ Type, Reason string }
		if json.Unmarshal(e.Error, &obj) == nil && obj.Type+obj.Reason != "" {
			return strings.TrimPrefix(obj.Type+": "+obj.Reason, ": ")
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
