// Package flinkrest reads what a Flink cluster reports about its jobs through the JobManager's REST
// API: the jobs and their states (/jobs/overview), each job's checkpoint statistics
// (/jobs/:jobid/checkpoints: counts.in_progress, latest.completed/savepoint/restored with their
// external_path, history[].status) and checkpoint configuration (/jobs/:jobid/checkpoints/config:
// externalization.enabled, externalization.delete_on_cancellation). It only reads: no call changes
// the cluster.
//
// Every call takes a context and is bounded by the client's timeout; TLS verification is on unless
// the operator turns it off by name (Config.InsecureSkipVerify). The package knows nothing of the
// index: it hands Reports to the caller (refindex decides with them).
package flinkrest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultTimeout bounds one request when Config.Timeout is 0.
const DefaultTimeout = 5 * time.Second

// maxBody bounds a response body: a checkpoints answer with the default history of 10 is a few KB.
const maxBody = 16 << 20

// Config is one REST endpoint and how to reach it.
type Config struct {
	// URL is the endpoint's base, e.g. http://jm:8081 (a path prefix of a proxy is kept).
	URL string
	// CAFile is a PEM bundle of certificate authorities to trust instead of the system's (https).
	CAFile string
	// InsecureSkipVerify skips the server certificate check (off by default; for tests only).
	InsecureSkipVerify bool
	// Username and Password send HTTP basic authentication (a proxy in front of the JobManager).
	Username, Password string
	// Token sends "Authorization: Bearer <Token>"; exclusive with Username.
	Token string
	// Timeout bounds each request (0: DefaultTimeout).
	Timeout time.Duration
}

// Client reads one endpoint.
type Client struct {
	base    *url.URL
	hc      *http.Client
	cfg     Config
	display string
}

// New checks c and returns its client.
func New(c Config) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(c.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("--flink-rest %q: %w", c.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--flink-rest %q: give the JobManager's REST address as http://host:port or https://host:port", c.URL)
	}
	if u.User != nil {
		return nil, fmt.Errorf("--flink-rest %q: credentials in the URL would show in logs and metrics; use --flink-rest-user/--flink-rest-password-file or --flink-rest-token-file", redact(u))
	}
	if c.Token != "" && c.Username != "" {
		return nil, fmt.Errorf("--flink-rest %s: basic authentication and a bearer token exclude each other; give one", u)
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil                                                                              // the JobManager is reached directly; a proxy is given as the URL itself
	tlsc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // named by the operator
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--flink-rest-ca %s: %w", c.CAFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--flink-rest-ca %s: no PEM certificate in it", c.CAFile)
		}
		tlsc.RootCAs = pool
	}
	tr.TLSClientConfig = tlsc
	tr.MaxIdleConnsPerHost = 2
	return &Client{base: u, cfg: c, display: u.String(),
		hc: &http.Client{Transport: tr, Timeout: c.Timeout,
			// A redirect could carry the credentials elsewhere: not followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

func redact(u *url.URL) string {
	c := *u
	c.User = nil
	return c.String()
}

// URL is the endpoint as logs, metrics and explanations name it.
func (c *Client) URL() string { return c.display }

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// StatusError is a non-2xx answer.
type StatusError struct {
	URL  string
	Code int
	Body string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: HTTP %d: %s", e.URL, e.Code, e.Body)
}

// get fetches base+p and decodes its JSON body into out.
func (c *Client) get(ctx context.Context, p string, out any) error {
	raw, err := c.Raw(ctx, p)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("GET %s%s: decoding the answer: %w", c.display, p, err)
	}
	return nil
}

// Raw returns the body of GET base+p (p starts with "/"), as the recorder stores it.
func (c *Client) Raw(ctx context.Context, p string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.display+p, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	switch {
	case c.cfg.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	case c.cfg.Username != "":
		req.SetBasicAuth(c.cfg.Username, c.cfg.Password)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s%s: %w", c.display, p, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s%s: reading the answer: %w", c.display, p, err)
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("GET %s%s: answer larger than %d bytes", c.display, p, maxBody)
	}
	if resp.StatusCode/100 != 2 {
		b := strings.TrimSpace(string(body))
		if len(b) > 300 {
			b = b[:300] + "…"
		}
		return nil, &StatusError{URL: c.display + p, Code: resp.StatusCode, Body: b}
	}
	return body, nil
}

// JobOverview is one entry of /jobs/overview.
type JobOverview struct {
	ID    string `json:"jid"`
	Name  string `json:"name"`
	State string `json:"state"`
	// Start and LastModification are epoch milliseconds.
	Start            int64 `json:"start-time"`
	End              int64 `json:"end-time"`
	LastModification int64 `json:"last-modification"`
}

// Overview lists the jobs the cluster knows (running ones and, for a while, terminated ones).
func (c *Client) Overview(ctx context.Context) ([]JobOverview, error) {
	var r struct {
		Jobs []JobOverview `json:"jobs"`
	}
	if err := c.get(ctx, "/jobs/overview", &r); err != nil {
		return nil, err
	}
	return r.Jobs, nil
}

// CheckpointRef is a checkpoint or savepoint in the statistics.
type CheckpointRef struct {
	ID           int64  `json:"id"`
	Status       string `json:"status"`
	IsSavepoint  bool   `json:"is_savepoint"`
	ExternalPath string `json:"external_path"`
	// Trigger is the trigger timestamp (epoch ms).
	Trigger int64 `json:"trigger_timestamp"`
	// Discarded: Flink has marked the completed checkpoint for deletion (it deletes it itself).
	Discarded bool `json:"discarded"`
}

// Restored is latest.restored.
type Restored struct {
	ID           int64  `json:"id"`
	IsSavepoint  bool   `json:"is_savepoint"`
	ExternalPath string `json:"external_path"`
	Timestamp    int64  `json:"restore_timestamp"`
}

// CheckpointStats is what ckguard reads of /jobs/:jobid/checkpoints.
type CheckpointStats struct {
	Counts struct {
		Restored   int64 `json:"restored"`
		Total      int64 `json:"total"`
		InProgress int64 `json:"in_progress"`
		Completed  int64 `json:"completed"`
		Failed     int64 `json:"failed"`
	} `json:"counts"`
	Latest struct {
		Completed *CheckpointRef `json:"completed"`
		Savepoint *CheckpointRef `json:"savepoint"`
		Failed    *CheckpointRef `json:"failed"`
		Restored  *Restored      `json:"restored"`
	} `json:"latest"`
	History []CheckpointRef `json:"history"`
}

// Checkpoints reads the job's checkpoint statistics.
func (c *Client) Checkpoints(ctx context.Context, jobID string) (CheckpointStats, error) {
	var r CheckpointStats
	if err := checkID(jobID); err != nil {
		return r, err
	}
	err := c.get(ctx, "/jobs/"+jobID+"/checkpoints", &r)
	return r, err
}

// CheckpointConfig is what ckguard reads of /jobs/:jobid/checkpoints/config.
type CheckpointConfig struct {
	Mode     string `json:"mode"`
	Interval int64  `json:"interval"`
	Timeout  int64  `json:"timeout"`
	// Externalization: whether completed checkpoints are kept past the job (enabled) and whether
	// Flink deletes them itself when the job is cancelled (delete_on_cancellation).
	Externalization struct {
		Enabled              bool `json:"enabled"`
		DeleteOnCancellation bool `json:"delete_on_cancellation"`
	} `json:"externalization"`
	StateBackend   string `json:"state_backend"`
	CheckpointStor string `json:"checkpoint_storage"`
}

// Config reads the job's checkpoint configuration.
func (c *Client) Config(ctx context.Context, jobID string) (CheckpointConfig, error) {
	var r CheckpointConfig
	if err := checkID(jobID); err != nil {
		return r, err
	}
	err := c.get(ctx, "/jobs/"+jobID+"/checkpoints/config", &r)
	return r, err
}

// checkID keeps a job id from a server answer from adding path segments to a request.
func checkID(id string) error {
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return fmt.Errorf("job id %q from the REST answer is not 32 hex digits", id)
	}
	return nil
}

// NotEnabled reports whether err is Flink's answer for a job without checkpointing (HTTP 404 on the
// checkpoints resources).
func NotEnabled(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}
