package protocol

import ()

// JobReport is one job's end in a free-play run.
type JobReport struct {
	JobID        int64       `json:"job_id"`
	Status       Status      `json:"status"`
	Owner        string      `json:"owner"`
	Epoch        int64       `json:"epoch"`
	ResultFrom   string      `json:"result_from"`
	ReceiverFrom string      `json:"receiver_from"`
	Claims       int         `json:"claims"`
	Violations   []Violation `json:"violations"`
}

// Report is the outcome of a free-play run: every job, checked.
type Report struct {
	Jobs       []JobReport `json:"jobs"`
	Done       int         `json:"done"`
	Safe       bool        `json:"safe"`
	Violations []Violation `json:"violations"`
	Headline   string      `json:"headline"`
	Verdict    string      `json:"verdict"`
	// Mark and Also are derived as an Outcome's are: Safe as a mark, and
	// the further violations' words, each once.
	Mark Mark     `json:"mark,omitempty"`
	Also []string `json:"also,omitempty"`
}
