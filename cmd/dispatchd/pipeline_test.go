package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/esfake"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/logsink"
)

// The whole event pipeline under concurrent dispatch load: dispatchd writes events to
// the outbox and relays them to Kafka (kfake, over TCP); the log sink indexes them into
// the fake Elasticsearch. Every dispatch and completion recorded in MySQL appears in the
// index exactly once, and the outbox ends empty.
func TestEventPipelineEndToEnd(t *testing.T) {
	t.Parallel()
	topic := "events-" + testenv.Suffix()
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kafka.Close)
	es := esfake.New(t)
	dsn := testenv.MySQLDSN(t)
	_, prefix := testenv.Redis(t)
	env := map[string]string{
		"DISPATCH_ADDR":                "127.0.0.1:0",
		"DISPATCH_MYSQL_DSN":           dsn,
		"DISPATCH_REDIS_PREFIX":        prefix,
		"DISPATCH_ADMIN_TOKEN":         "a-long-admin-token",
		"DISPATCH_KAFKA_BROKERS":       strings.Join(kafka.ListenAddrs(), ","),
		"DISPATCH_KAFKA_TOPIC":         topic,
		"DISPATCH_RELAY_POLL_INTERVAL": "20ms",
	}
	addr, stopDispatchd := startDispatchd(t, withTestRedis(env))
	base := "http://" + addr

	cfg := logsink.DefaultConfig()
	cfg.KafkaBrokers, cfg.ESURLs = kafka.ListenAddrs(), []string{es.URL()}
	cfg.Topic, cfg.DLQTopic, cfg.Group = topic, topic+".dlq", "group-"+testenv.Suffix()
	cfg.CreateTopics, cfg.SessionTimeout = false, 6*time.Second
	cfg.CommitInterval, cfg.FlushInterval = 20*time.Millisecond, 20*time.Millisecond
	sink, err := logsink.NewSink(cfg, slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	sinkCtx, stopSink := context.WithCancel(t.Context())
	sinkDone := make(chan error, 1)
	go func() { sinkDone <- sink.Run(sinkCtx) }()

	call := func(method, path, token string, body any) map[string]any {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode >= 300 {
			t.Errorf("%s %s: %d %v", method, path, resp.StatusCode, out)
		}
		return out
	}
	const admin = "a-long-admin-token"
	tpl := call("POST", "/v1/admin/templates", admin, map[string]any{"name": "t", "schema": map[string]any{}})["id"]
	var uids []string
	for i := 0; i < 30; i++ {
		uids = append(uids, fmt.Sprint("u", i))
	}
	call("PUT", "/v1/admin/groups/g/members", admin, map[string]any{"uids": uids})
	for i := 0; i < 10; i++ {
		call("POST", "/v1/admin/tasks/once", admin, map[string]any{"executor": "gid_g", "template_id": tpl,
			"start_time": time.Now().Add(-time.Duration(i+1) * time.Minute).UTC().Format(time.RFC3339), "dispatch_times": 20})
	}
	var wg sync.WaitGroup
	for _, u := range uids {
		key := call("POST", "/v1/admin/clients/"+u+"/keys", admin, nil)["client_key"].(string)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r := call("POST", "/v1/fetch", key, nil)
				task, _ := r["task"].(map[string]any)
				if task == nil {
					return
				}
				call("POST", "/v1/complete", key, map[string]any{"log_id": task["log_id"], "result": "success"})
			}
		}()
	}
	wg.Wait()

	st, err := store.Open(t.Context(), dsn, store.OpenOptions{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var want []string
	rows, err := st.DB().Query("SELECT log_id, state FROM dispatch")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var state int
		rows.Scan(&id, &state)
		want = append(want, id+"/dispatch")
		if state == int(taskd.StateDone) {
			want = append(want, id+"/complete")
		}
	}
	rows.Close()
	sort.Strings(want)
	if len(want) != 2*200 {
		t.Fatalf("10 tasks x quota 20, all completed: %d events in MySQL, want 400", len(want))
	}

	indexed := func() []string {
		var got []string
		for _, d := range es.Docs() {
			var ev struct {
				LogID string `json:"log_id"`
				Type  string `json:"type"`
			}
			json.Unmarshal(d.Source, &ev)
			got = append(got, ev.LogID+"/"+ev.Type)
		}
		sort.Strings(got)
		return got
	}
	deadline := time.Now().Add(30 * time.Second)
	for es.Count() < len(want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := indexed(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("indexed events differ from MySQL's dispatches: %d indexed, %d expected", len(got), len(want))
	}
	if d := es.Duplicates(); len(d) > 0 {
		t.Fatalf("duplicated documents: %v", d)
	}
	var backlog int
	for time.Now().Before(deadline) {
		if st.DB().QueryRow("SELECT COUNT(*) FROM event_outbox").Scan(&backlog); backlog == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if backlog != 0 {
		t.Fatalf("outbox still holds %d rows", backlog)
	}
	stopSink()
	if err := <-sinkDone; err != nil {
		t.Fatalf("sink: %v", err)
	}
	if err := stopDispatchd(); err != nil {
		t.Fatalf("dispatchd: %v", err)
	}
}
