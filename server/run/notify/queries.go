package notify

import (
	"github.com/fencelab/fencelab/engine/playground"
	"github.com/jackc/pgx/v5"
)

// The Notifier's SQL, all of it: its connection only LISTENs and
// UNLISTENs.

// channelListen subscribes the connection to a channel.
func channelListen(channel string) playground.Statement {
	return playground.Statement{Name: "ChannelListen", SQL: "LISTEN " + pgx.Identifier{channel}.Sanitize()}
}

// channelUnlisten ends the connection's subscription to a channel.
func channelUnlisten(channel string) playground.Statement {
	return playground.Statement{Name: "ChannelUnlisten", SQL: "UNLISTEN " + pgx.Identifier{channel}.Sanitize()}
}
