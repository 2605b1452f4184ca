// Package class is a teacher's class: a room of students who each build
// and check their own solution while the projector shows the class.
//
// A class is rows in Postgres, in the schema fencelab_classes, so that a
// teacher's reload, a server's restart or another instance on the same
// database loses no student and no result:
//
//   - a class: its id, the short code students join by, the hash of the
//     teacher's token, when it was made, last used and ended;
//   - its students: each one's chosen name (unique in the class, whatever
//     its case), the hash of the student's own token, and the session
//     the student drives now;
//   - every check a student's session finished: the statements checked
//     and the report, with its time.
//
// Tokens are 32 random bytes; only their SHA-256 is kept, so the tables
// let nobody act as a teacher or a student. A class nobody uses for Idle
// ends on its own; an ended class takes no student and no check, and its
// rows are deleted a day after its end, the teacher's last chance to
// export. The package knows no HTTP: server/api serves it.
package class

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencelab/fencelab/engine"
	"github.com/fencelab/fencelab/server/fault"
	"github.com/fencelab/fencelab/server/lab/protocol"
	"github.com/fencelab/fencelab/server/postgres/pgsetup"
	"github.com/fencelab/fencelab/server/sandbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mtibben/confusables"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Config sets a Store up.
type Config struct {
	Pool *pgxpool.Pool
	// Idle ends a class nobody has used for this long. Default 3h.
	Idle time.Duration
	// Keep is how long an ended class stays, to be exported. Default 24h.
	Keep time.Duration
	// MaxStudents bounds a class. Default 60.
	MaxStudents int
	// MaxOpenPerClient bounds the classes open at once per client
	// address (a client key; "" has no cap). Default 3.
	MaxOpenPerClient int
}

// Store keeps the classes. Safe for concurrent use, by any number of
// instances on one database.
type Store struct {
	pool *pgxpool.Pool
	cfg  Config
}

// Open makes the classes' tables if they are not there, and returns the
// store.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Pool == nil {
		return nil, errors.New("class: Config needs a Pool")
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 3 * time.Hour
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 24 * time.Hour
	}
	if cfg.MaxStudents <= 0 {
		cfg.MaxStudents = 60
	}
	if cfg.MaxOpenPerClient <= 0 {
		cfg.MaxOpenPerClient = 3
	}
	// Made once per database, with no DDL once they are there: it would
	// deadlock with a running instance's checks (pgsetup).
	if err := pgsetup.Once(ctx, cfg.Pool, "fencelab_classes", readySQL, setupSQL); err != nil {
		return nil, fmt.Errorf("class: set up the tables: %w", err)
	}
	return &Store{pool: cfg.Pool, cfg: cfg}, nil
}

// Class is one class as its teacher sees it.
type Class struct {
	ID      string     `json:"id"`
	Code    string     `json:"code"` // what students type to join: six letters and digits, shown as ABC-234
	Created time.Time  `json:"created"`
	Used    time.Time  `json:"used"`
	Ended   *time.Time `json:"ended,omitempty"`
	// IdleAfterS is how long, in seconds, the class may go unused before it ends.
	IdleAfterS int64 `json:"idle_after_s"`
}

// MarshalJSON adds code_shown, the code as people read and type it
// (ABC-234): Go owns that rule, and the pages show what it says.
func (c Class) MarshalJSON() ([]byte, error) {
	type plain Class
	return json.Marshal(struct {
		plain
		CodeShown string `json:"code_shown"`
	}{plain(c), FormatCode(c.Code)})
}

// Student is one student of a class.
type Student struct {
	ID      string    `json:"id"`
	Class   string    `json:"class"`
	Name    string    `json:"name"`
	Joined  time.Time `json:"joined"`
	Session string    `json:"-"` // the session the student drives now
}

// Create opens a new class for client (a client key: its address; ""
// for one with no cap) and returns it with its teacher's token, which is
// shown once and never kept. A client with MaxOpenPerClient classes open
// is refused as busy.
func (s *Store) Create(ctx context.Context, client string) (Class, string, error) {
	token := newToken()
	for range 8 { // a code taken by an open class: draw another
		c := Class{ID: newID(), Code: newCode(), IdleAfterS: int64(s.cfg.Idle / time.Second)}
		err := s.create(ctx, &c, client, hash(token))
		if isUnique(err) {
			continue
		}
		if err != nil {
			return Class{}, "", err
		}
		return c, token, nil
	}
	return Class{}, "", fault.Errorf(fault.Busy, "no free class code was found; try again")
}

func (s *Store) create(ctx context.Context, c *Class, client string, teacher []byte) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return dbError("open a class", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op once committed
	if _, err := tx.Exec(ctx, clientLockSQL, client); err != nil {
		return dbError("open a class", err)
	}
	err = tx.QueryRow(ctx, createSQL, c.ID, c.Code, teacher, client, s.cfg.MaxOpenPerClient).Scan(&c.Created, &c.Used)
	switch {
	case isUnique(err):
		return err
	case errors.Is(err, pgx.ErrNoRows):
		return fault.Errorf(fault.Busy, "this address has %d classes open, its limit: end one first", s.cfg.MaxOpenPerClient)
	case err != nil:
		return dbError("open a class", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return dbError("open a class", err)
	}
	return nil
}

// AsTeacher returns the class whose teacher holds token, and marks it
// used. A wrong token, or another class's, is Forbidden; a class that is
// gone, NotFound.
func (s *Store) AsTeacher(ctx context.Context, id, token string) (Class, error) {
	if !IDForm(id) {
		return Class{}, fault.Errorf(fault.NotFound, "that is not a class id: a class id is a c and 16 letters, digits, '-' and '_', as POST /api/classes gives")
	}
	var c Class
	var teacher []byte
	err := s.pool.QueryRow(ctx, teacherSQL, id).Scan(&c.ID, &c.Code, &teacher, &c.Created, &c.Used, &c.Ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return Class{}, fault.Errorf(fault.NotFound, "there is no class %s (a class is kept a day after it ends)", id)
	}
	if err != nil {
		return Class{}, dbError("read the class", err)
	}
	if token == "" || !equalHash(teacher, hash(token)) {
		return Class{}, fault.Errorf(fault.Forbidden, "only the class's teacher may do this (the teacher's token is missing or wrong)")
	}
	c.IdleAfterS = int64(s.cfg.Idle / time.Second)
	return c, nil
}

// Join takes a student into the class whose code is code. A token from
// an earlier join of the same class (a reload, a return) is that student
// again, whatever name comes with it; otherwise name makes a new student,
// and the student's token is returned, to be kept by the student's
// browser. An ended class, a full one and a name taken are refused.
func (s *Store) Join(ctx context.Context, code, name, token string) (Student, string, error) {
	code, err := ParseCode(code)
	if err != nil {
		return Student{}, "", err
	}
	var classID string
	if err := s.pool.QueryRow(ctx, openByCodeSQL, code).Scan(&classID); errors.Is(err, pgx.ErrNoRows) {
		return Student{}, "", fault.Errorf(fault.NotFound, "no open class has the code %s: check it with your teacher", FormatCode(code))
	} else if err != nil {
		return Student{}, "", dbError("find the class", err)
	}
	if token != "" {
		st, err := s.studentByToken(ctx, token)
		switch {
		case err == nil && st.Class == classID:
			return st, token, s.touch(ctx, classID)
		case err == nil:
			// Another class's student: a new student here.
		case fault.CodeOf(err) != fault.Forbidden:
			return Student{}, "", err
		}
	}
	name, err = ParseName(name)
	if err != nil {
		return Student{}, "", err
	}
	st := Student{ID: newID(), Class: classID, Name: name}
	token = newToken()
	if err := s.join(ctx, &st, hash(token)); err != nil {
		return Student{}, "", err
	}
	return st, token, s.touch(ctx, classID)
}

// join adds a student to an open class that has room, holding the
// class's row meanwhile, so that students joining at once count each
// other.
func (s *Store) join(ctx context.Context, st *Student, tokenHash []byte) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return dbError("join the class", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op once committed
	if err := tx.QueryRow(ctx, lockOpenSQL, st.Class).Scan(new(int)); errors.Is(err, pgx.ErrNoRows) {
		return fault.Errorf(fault.Conflict, "the class has ended")
	} else if err != nil {
		return dbError("join the class", err)
	}
	err = tx.QueryRow(ctx, joinSQL, st.ID, st.Class, st.Name, tokenHash, s.cfg.MaxStudents, NameKey(st.Name)).Scan(&st.Joined)
	switch {
	case isUnique(err):
		return fault.Errorf(fault.Conflict, "the name %q is taken in this class, or one that reads the same: choose another", st.Name)
	case errors.Is(err, pgx.ErrNoRows):
		return fault.Errorf(fault.Limit, "the class is full: it has %d students, its limit", s.cfg.MaxStudents)
	case err != nil:
		return dbError("join the class", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return dbError("join the class", err)
	}
	return nil
}

// AsStudent returns the student whose token is token, of a class still
// open. A token nobody holds is Forbidden.
func (s *Store) AsStudent(ctx context.Context, token string) (Student, error) {
	st, err := s.studentByToken(ctx, token)
	if err != nil {
		return Student{}, err
	}
	return st, nil
}

func (s *Store) studentByToken(ctx context.Context, token string) (Student, error) {
	if token == "" {
		return Student{}, fault.Errorf(fault.Forbidden, "no student token was given")
	}
	var st Student
	var session *string
	err := s.pool.QueryRow(ctx, studentSQL, hash(token)).Scan(&st.ID, &st.Class, &st.Name, &st.Joined, &session)
	if errors.Is(err, pgx.ErrNoRows) {
		return Student{}, fault.Errorf(fault.Forbidden, "this student token belongs to no student of an open class")
	}
	if err != nil {
		return Student{}, dbError("read the student", err)
	}
	if session != nil {
		st.Session = *session
	}
	return st, nil
}

// Students lists the students of a class, in the order they joined,
// with the session each drives now.
func (s *Store) Students(ctx context.Context, classID string) ([]Student, error) {
	rs, err := s.pool.Query(ctx, studentsSQL, classID)
	if err != nil {
		return nil, dbError("read the class's students", err)
	}
	defer rs.Close()
	var out []Student
	for rs.Next() {
		st := Student{Class: classID}
		if err := rs.Scan(&st.ID, &st.Name, &st.Joined, &st.Session); err != nil {
			return nil, dbError("read the class's students", err)
		}
		out = append(out, st)
	}
	if err := rs.Err(); err != nil {
		return nil, dbError("read the class's students", err)
	}
	return out, nil
}

// SetSession says which session the student drives now: the one whose
// checks are the student's.
func (s *Store) SetSession(ctx context.Context, studentID, sessionID string) error {
	if _, err := s.pool.Exec(ctx, setSessionSQL, studentID, sessionID); err != nil {
		return dbError("keep the student's session", err)
	}
	return nil
}

// StudentSession is the session a student drives now ("" for none).
func (s *Store) StudentSession(ctx context.Context, studentID string) (string, error) {
	var id string
	if err := s.pool.QueryRow(ctx, sessionOfSQL, studentID).Scan(&id); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return "", nil
		}
		return "", dbError("read the student's session", err)
	}
	return id, nil
}

// Record keeps a student's check, if their class is open, and says
// whether it was. The statements are kept as the student sent them, for
// the teacher's export. The line keeps its checks with recordTx, in the
// transaction that completes the check's job.
func (s *Store) Record(ctx context.Context, studentID string, sol sandbox.Solution, rep protocol.CheckReport) (bool, error) {
	return record(ctx, s.pool, studentID, sol, rep)
}

// recordTx is Record in tx.
func (s *Store) recordTx(ctx context.Context, tx pgx.Tx, studentID string, sol sandbox.Solution, rep protocol.CheckReport) error {
	_, err := record(ctx, tx, studentID, sol, rep)
	return err
}

func record(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, studentID string, sol sandbox.Solution, rep protocol.CheckReport) (bool, error) {
	solJSON, err := json.Marshal(sol)
	if err != nil {
		return false, err
	}
	repJSON, err := json.Marshal(rep)
	if err != nil {
		return false, err
	}
	tag, err := db.Exec(ctx, recordStudentSQL, studentID, rep.Pass, solJSON, repJSON)
	if err != nil {
		return false, dbError("keep the student's check", err)
	}
	return tag.RowsAffected() == 1, nil
}

// End ends the class: it takes no student and no check from now on. Its
// board and export stay for Keep.
func (s *Store) End(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, endSQL, id); err != nil {
		return dbError("end the class", err)
	}
	return nil
}

// Sweep ends the classes nobody used for Idle and deletes the ones ended
// longer than Keep ago; it returns how many it ended.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	tag, err := s.pool.Exec(ctx, endIdleSQL, s.cfg.Idle.Seconds())
	if err != nil {
		return 0, dbError("end the idle classes", err)
	}
	if _, err := s.pool.Exec(ctx, forgetSQL, s.cfg.Keep.Seconds()); err != nil {
		return 0, dbError("forget the ended classes", err)
	}
	return int(tag.RowsAffected()), nil
}

// Ended is which of the classes ids have ended, or are gone (forgotten,
// or never were): those whose students' pages are still to be told.
func (s *Store) Ended(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rs, err := s.pool.Query(ctx, endedSQL, ids)
	if err != nil {
		return nil, dbError("read which classes ended", err)
	}
	ended, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return nil, dbError("read which classes ended", err)
	}
	return ended, nil
}

func (s *Store) touch(ctx context.Context, classID string) error {
	if _, err := s.pool.Exec(ctx, touchSQL, classID); err != nil {
		return dbError("mark the class used", err)
	}
	return nil
}

// MaxName is the longest name a student may choose, in characters.
const MaxName = 40

// ParseName checks a student's chosen name: 1 to MaxName characters once
// trimmed, letters, digits, marks, punctuation, symbols and spaces only
// (no control or format character, no invalid UTF-8, no U+FFFD, which is
// what a lone surrogate decodes to).
func ParseName(name string) (string, error) {
	name = strings.TrimSpace(name)
	switch n := utf8.RuneCountInString(name); {
	case !utf8.ValidString(name):
		return "", fault.Errorf(fault.Invalid, "the name is not valid UTF-8")
	case n == 0:
		return "", fault.Errorf(fault.Invalid, "a name is needed: the one your class will see on the board")
	case n > MaxName:
		return "", fault.Errorf(fault.Invalid, "the name is %d characters long; at most %d", n, MaxName)
	}
	for _, r := range name {
		ok := unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S) || r == ' '
		if !ok || r == utf8.RuneError {
			return "", fault.Errorf(fault.Invalid, "the name has a character a name may not have (%U): letters, digits, punctuation and spaces only", r)
		}
	}
	return name, nil
}

// NameKey is what two names must differ in to be two students: the name
// as a person reads it. Compatibility forms are folded (NFKC: "Ａｄａ" is
// "Ada"), then case, then every character to its Unicode confusable
// skeleton (UTS #39: a Cyrillic "А" is a Latin "A", "0" is "O"), and case
// again, since a skeleton may be upper case. A name taken under one
// spelling is taken under every spelling that looks the same on the board.
func NameKey(name string) string {
	fold := cases.Fold()
	return fold.String(confusables.Skeleton(fold.String(norm.NFKC.String(name))))
}

// The code's alphabet: no 0, O, 1 or I, which a projector's reader mixes
// up.
const codeAlphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

const codeLen = 6

// ParseCode reads a class code as a student types it: any case, with or
// without the dash or spaces.
func ParseCode(s string) (string, error) {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '-' || r == ' ':
		case r < utf8.RuneSelf && strings.ContainsRune(codeAlphabet, unicode.ToUpper(r)):
			b.WriteRune(unicode.ToUpper(r))
		default:
			return "", fault.Errorf(fault.Invalid, "a class code has six letters and digits, like ABC-234")
		}
		if b.Len() > codeLen {
			break
		}
	}
	if b.Len() != codeLen {
		return "", fault.Errorf(fault.Invalid, "a class code has six letters and digits, like ABC-234")
	}
	return b.String(), nil
}

// CodePattern is what ParseCode takes, as an HTML pattern attribute (a
// JavaScript regular expression with the v flag): six characters of the
// alphabet in either case, with dashes and spaces anywhere around them.
// The join page tells by it whether a refusal is about the code.
func CodePattern() string {
	var set strings.Builder
	for _, r := range codeAlphabet {
		set.WriteRune(r)
		if lower := unicode.ToLower(r); lower != r {
			set.WriteRune(lower)
		}
	}
	return fmt.Sprintf(`[\- ]*(?:[%s][\- ]*){%d}`, set.String(), codeLen)
}

// FormatCode shows a code as students read it: ABC-234.
func FormatCode(code string) string {
	if len(code) != codeLen {
		return code
	}
	return code[:3] + "-" + code[3:]
}

func newCode() string {
	b := make([]byte, codeLen)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = codeAlphabet[int(b[i])%len(codeAlphabet)] // 256 is a multiple of 32: no bias
	}
	return string(b)
}

// IDForm reports whether id has the form of the ids newID draws: a c
// and the base64url of 12 random bytes. Anything else (a NUL, bytes that
// are not UTF-8, a kilobyte) is answered before it reaches Postgres, which
// would refuse the bytes and log each refusal.
func IDForm(id string) bool {
	if len(id) != 17 || id[0] != 'c' {
		return false
	}
	for i := 1; i < len(id); i++ {
		b := id[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_') {
			return false
		}
	}
	return true
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "c" + base64.RawURLEncoding.EncodeToString(b)
}

func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

func equalHash(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	var d byte
	for i := range a {
		d |= a[i] ^ b[i]
	}
	return d == 0
}

func isUnique(err error) bool {
	code, ok := fault.SQLState(err)
	return ok && code == "23505"
}

// dbError is a database error as the engine reads it (an outage is
// Unavailable), with what could not be done.
func dbError(what string, err error) error { return engine.TranslateError("could not "+what, err) }
