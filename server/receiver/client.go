package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fencelab/fencelab/engine"
)

// Client reads a standalone receiver over its HTTP API. It is an
// engine.ReceiverView, so a run's outcome can be read from a receiver
// that lives in another process with another database.
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:8081
	HTTP    *http.Client
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.BaseURL, "/")+path, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("receiver at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("receiver at %s: %s: %w", c.BaseURL, path, engine.ErrJobNotFound)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("receiver at %s: %s: HTTP %d: %s", c.BaseURL, path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

// Get reads what the receiver holds for a job.
func (c *Client) Get(ctx context.Context, jobID int64) (engine.Held, error) {
	var h engine.Held
	err := c.get(ctx, fmt.Sprintf("/deliveries/%d", jobID), &h)
	return h, err
}

// Decisions reads the receiver's decisions for a job.
func (c *Client) Decisions(ctx context.Context, jobID int64) ([]engine.DecisionRecord, error) {
	var ds []engine.DecisionRecord
	err := c.get(ctx, fmt.Sprintf("/decisions/%d", jobID), &ds)
	return ds, err
}
