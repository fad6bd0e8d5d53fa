// Package swutest lets Go tests drive the real SWUpdate client (Debian's swupdate
// 2022.12, /usr/bin/swupdate) in suricatta (hawkBit DDI) mode against a server on
// 127.0.0.1, and builds the signed .swu images it installs.
//
//	signer := swutest.NewSigner(t)                        // key + cert.pem
//	img := signer.Build(t, swutest.ImageSpec{Version: "1.0.1"})
//	bad := signer.Build(t, swutest.ImageSpec{Hardware: "9.9"}) // install fails
//	c := swutest.Start(t, swutest.Config{URL: srv.URL, ControllerID: "dev01",
//		TargetToken: "secret", CertPath: signer.CertPath})
//	// … serve img.Bytes; wait for the "All Chunks Installed." feedback …
//	c.Restart(swutest.ConfirmSuccess)                     // the reboot: closed/success
//
// Everything below was measured with this package's tests and a few probes (a mock DDI
// server, as in swutest_test.go, polling sleep 00:00:01) and read in SWUpdate's 2022.12 source (suricatta/server_hawkbit.c,
// ipc/network_ipc.c, core/notifier.c); see also shared/ddi/NOTES.md.
//
// # Command line
//
// Start runs, with TMPDIR set to the client's own directory:
//
//	swupdate -v -f DIR/swupdate.cfg -B none -k CERT -H swutest:1.0 \
//	  -u "-t TENANT -u URL -i ID -p POLL [-k TARGETTOKEN | -g GATEWAYTOKEN] [-c 2|3]"
//
// The outer -k is the certificate that verifies images; inside -u, -k is the target
// token and -g the gateway token (swupdate -k cert.pem -u '-h' lists them; without an
// outer -k, -u '-h' only says the build wants a public key). SWUpdate exits when given
// both tokens. It splits -u's argument at white space with no quoting, so Config
// refuses values with spaces. -f is always given, so /etc/swupdate.cfg is never read;
// the file holds an empty globals section (without one SWUpdate exits: "'globals'
// section missing") and, if Config.Identify is set, the identify section. -B none keeps
// the bootloader environment, and so the update state, in RAM (grub is compiled in
// too): a restarted process has forgotten everything, which is why -c exists.
//
// # Isolation
//
// SWUpdate 2022.12 puts its two IPC sockets, sockinstctrl and swupdateprog, and its
// scratch files (the extracted sw-description, scripts/, datadst/) under $TMPDIR (in
// /tmp without it); no config option moves the sockets in this version. Each Client gets
// its own TMPDIR (os.MkdirTemp, short enough for sun_path), so several run at once.
// What TMPDIR cannot separate is the notifier: the main process binds the Linux abstract
// socket "@NotifyServer", retrying NotifyServer1 … NotifyServer9 and "NotifyServer:" on
// EADDRINUSE, so at most eleven swupdate processes run per network namespace; the
// twelfth exits with "Error binding notifier socket: Address already in use". Start
// therefore takes one of ten slots (flock'd files in /tmp/swutest-slots, shared by every
// test binary on the machine) and waits up to two minutes for one. The children
// (suricatta, chunks_downloader) bind "@Notify<pid>".
//
// Each process runs in its own process group with Pdeathsig SIGKILL. Stop sends SIGTERM
// to the group and SIGKILL after a second: the main process usually exits within
// milliseconds, but about one SIGTERM in fifteen leaves it hung in a futex wait.
//
// # What the client sends (DDI paths under URL/TENANT/controller/v1/ID)
//
// Polling: the first base poll happens at once on start; after that the base poll's
// config.polling.sleep sets the interval (it overrides -p). In every cycle that found
// a deploymentBase link, the client fetched base and deploymentBase twice before acting.
//
// Install of a good image: GET base, GET deploymentBase/N (the href as given), GET
// base, GET deploymentBase/N, then POST deploymentBase/N/feedback (URL built from the
// id, not the href), all within a few milliseconds of start, each feedback with
// execution "proceeding" and finished "none":
//
//  1. progress {cnt 0, of 1}, details ["Installing Update Chunk Artifacts."];
//     then the artifact GET (with the same Authorization header);
//  2. about one second later (SWUpdate's IPC status loop sleeps a second), progress
//     {cnt 0, of 0} with details = up to 48 of SWUpdate's own log lines, quotes
//     removed, e.g. "SWUPDATE successful !";
//  3. progress {cnt 1, of 1}, details ["Installed Chunk."];
//  4. progress {cnt 1, of 1}, details ["All Chunks Installed."], about 1.05-1.1 s after
//     Start for a 2.4 KB .swu, whatever the poll interval.
//
// Bodies look like this (whitespace aside; "id" and "time" are legacy fields):
//
//	{"id":42,"time":"20261128T112839","status":{"result":{"progress":{"cnt":1,"of":1},
//	 "finished":"none"},"execution":"proceeding","details":["All Chunks Installed."]}}
//
// Afterwards the client keeps polling and logs "pending testing"; it
// does not install the offered action again.
//
// Confirmation after the "reboot": Restart(ConfirmSuccess) (-c 2) makes the new
// process, before its main loop, GET base and deploymentBase/N and POST closed/success
// with progress {cnt 0, of 0} and details ["Update Installed."], within about 0.1 s of
// starting. ConfirmFailure (-c 3) sends closed/failure ["Update Failed."]; -c 1 (not
// offered here) would send proceeding/none ["Update Installed, Testing Pending."]. By
// the source, with no deploymentBase link offered at that moment nothing is reported.
//
// Failed install (ImageSpec.Hardware not matching -H): proceeding {0 of 1}
// ["Installing Update Chunk Artifacts."], then proceeding {0 of 0} with log lines, then
// closed/failure with progress {cnt 0, of 1} and details ending in "No suitable .swu
// image found". The cause ("ERROR : SW not compatible with hardware", "ERROR : HASH
// mismatch : …") is in the log feedback or before that last detail of the closed one,
// e.g. ["ERROR : HASH mismatch : 47ef… <--> b8ef…","No suitable .swu image found"]:
// the log thread and the install wait both read SWUpdate's one IPC status queue, and
// whichever takes an ERROR message reports it. The hardware mismatch failed on the
// first attempt in every run measured (32 of 32 with eight clients at once).
// ImageSpec.WrongSHA256 fails later, at the hash check after the whole .swu has
// streamed, and that same race can then hand the install wait a stale result: with
// eight clients at once about one attempt in five was reported as proceeding
// "Installed Chunk." / "All Chunks Installed." although nothing installed. Such a client
// has no installed state, so at its next poll it installs the still offered action
// again and reports closed/failure. A server must accept closed/failure after "All
// Chunks Installed." for the same action; a test that needs a failure on the first
// attempt uses Hardware.
//
// Cancel: a base poll with _links.cancelAction.href = …/cancelAction/N makes the client
// GET that href and, within a second of the poll, POST to href + "/feedback":
//
//	{"id":N,"time":"…","status":{"result":{"finished":"success"},"execution":"closed",
//	 "details":["cancellation acknowledged."]}}
//
// configData: only with Config.Identify set. Right after a base poll the client PUTs
// to URL/TENANT/controller/v1/ID/configData (built, not the href):
//
//	{"id":"","time":"…","status":{"result":{"finished":"success"},"execution":"closed",
//	 "details":[""]},"data":{"serialNo":"dev-d-sn","hwRevision":"1.0"}}
//
// It does so once per process start if the base poll has no configData link, and after
// every base poll that carries the link (hawkBit offers it only while it wants
// attributes; a server that always offers it gets a PUT per poll).
//
// Authorization: "TargetToken <t>" or "GatewayToken <t>" on every request, the artifact
// download included; none without a token.
package swutest
