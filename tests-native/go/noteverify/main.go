// noteverify checks a C2SP signed note with Go's golang.org/x/mod/sumdb/note, an
// implementation independent of repoch's (docs/AUDITOR.md, "Checkpoints").
//
// Usage: noteverify NAME PUBKEY_HEX NOTE_FILE
// Exit 0 and the note text on stdout if a signature by NAME/PUBKEY verifies; exit 1 otherwise.
package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"

	"golang.org/x/mod/sumdb/note"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: noteverify NAME PUBKEY_HEX NOTE_FILE")
		os.Exit(2)
	}
	pub, err := hex.DecodeString(os.Args[2])
	if err != nil || len(pub) != ed25519.PublicKeySize {
		fmt.Fprintln(os.Stderr, "noteverify: the public key is not 64 hex digits")
		os.Exit(2)
	}
	vkey, err := note.NewEd25519VerifierKey(os.Args[1], ed25519.PublicKey(pub))
	if err != nil {
		fmt.Fprintln(os.Stderr, "noteverify:", err)
		os.Exit(2)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		fmt.Fprintln(os.Stderr, "noteverify:", err)
		os.Exit(2)
	}
	msg, err := os.ReadFile(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "noteverify:", err)
		os.Exit(2)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		fmt.Fprintln(os.Stderr, "noteverify: rejected:", err)
		os.Exit(1)
	}
	fmt.Print(n.Text)
}
