package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The progress socket: a command saves a checkpoint through the agent that runs it
// (`taskd-agent progress '{"checkpoint": {...}}'`), over a Unix socket whose path is in
// the command's TASKD_AGENT_SOCKET. A request is one JSON line, {"log_id",
// "run_token", "checkpoint"}, with the log id and token of the command's run
// (TASKD_LOG_ID, TASKD_RUN_TOKEN); the answer one line, {"ok": true} or
// {"error": "..."}.

// maxProgressLine bounds a request: the server takes a checkpoint of 16 KiB at most.
const maxProgressLine = 64 << 10

type progressRequest struct {
	LogID      string          `json:"log_id"`
	RunToken   string          `json:"run_token"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

type progressAnswer struct {
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

// progressServer answers the agent's commands' checkpoints. Beside its socket, in the
// agent's own directory, bin holds the agent's binary as taskd-agent (a link), which
// the commands' PATH starts with: a command's `taskd-agent progress` is the agent
// that runs it, whether or not taskd-agent is installed in the PATH.
type progressServer struct {
	ln   net.Listener
	path string
	bin  string // the link to the agent's binary
	save func(logID, token string, checkpoint json.RawMessage) error
}

// listenProgress listens on a socket in a directory of the agent's own (0700), so that
// only the agent's user reaches it, and links the agent's binary there.
func listenProgress(save func(logID, token string, checkpoint json.RawMessage) error) (*progressServer, error) {
	dir, err := os.MkdirTemp("", "taskd-agent-")
	if err != nil {
		return nil, err
	}
	bin, err := linkSelf(filepath.Join(dir, "bin"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	path := filepath.Join(dir, "progress.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &progressServer{ln: ln, path: path, bin: bin, save: save}
	go s.serve()
	return s, nil
}

// linkSelf links the running binary into dir as taskd-agent, and returns the link.
func linkSelf(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("the agent's own binary: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	link := filepath.Join(dir, "taskd-agent")
	if err := os.Symlink(self, link); err != nil {
		return "", err
	}
	return link, nil
}

func (s *progressServer) serve() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		go s.answer(conn)
	}
}

func (s *progressServer) answer(conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 4096), maxProgressLine)
	reply := func(err error) {
		a := progressAnswer{OK: err == nil}
		if err != nil {
			a.Error = err.Error()
		}
		b, _ := json.Marshal(a)
		conn.Write(append(b, '\n'))
	}
	if !sc.Scan() {
		reply(fmt.Errorf("no request (at most %d bytes, one line)", maxProgressLine))
		return
	}
	var req progressRequest
	if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
		reply(fmt.Errorf("request: %w", err))
		return
	}
	if req.LogID == "" || req.RunToken == "" || len(bytes.TrimSpace(req.Checkpoint)) == 0 {
		reply(errors.New(`request: "log_id", "run_token" and "checkpoint" are required`))
		return
	}
	reply(s.save(req.LogID, req.RunToken, req.Checkpoint))
}

func (s *progressServer) close() {
	s.ln.Close()
	os.RemoveAll(filepath.Dir(s.path))
}

// sendProgress is `taskd-agent progress ARG`, run by a command: ARG is
// {"checkpoint": {...}}; the socket, the log id and the run's token come from the
// command's environment.
func sendProgress(arg string, getenv func(string) string) error {
	path, logID, token := getenv("TASKD_AGENT_SOCKET"), getenv("TASKD_LOG_ID"), getenv("TASKD_RUN_TOKEN")
	if path == "" || logID == "" || token == "" {
		return errors.New("TASKD_AGENT_SOCKET, TASKD_LOG_ID and TASKD_RUN_TOKEN are not set: run this from a command taskd-agent runs")
	}
	var body struct {
		Checkpoint json.RawMessage `json:"checkpoint"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(arg)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || len(body.Checkpoint) == 0 {
		return fmt.Errorf(`want one argument, {"checkpoint": {...}}: %v`, err)
	}
	req, _ := json.Marshal(progressRequest{LogID: logID, RunToken: token, Checkpoint: body.Checkpoint})
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return fmt.Errorf("the agent's socket: %w", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("the agent's socket: %w", err)
	}
	var a progressAnswer
	if err := json.NewDecoder(conn).Decode(&a); err != nil {
		return fmt.Errorf("the agent's answer: %w", err)
	}
	if !a.OK {
		return fmt.Errorf("the agent: %s", a.Error)
	}
	return nil
}
