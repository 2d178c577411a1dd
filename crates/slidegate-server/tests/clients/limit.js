// Takes a limit through slidegate's RESP port with ioredis (tests/resp.rs).
//
//     node limit.js PORT[,PORT...] KEY
//
// Sends SG.ACQUIRE KEY:sg 3 60000 and CL.THROTTLE KEY:cl 2 3 60 four times
// each, to the ports in turn, and prints the replies as one JSON object.
const Redis = require("ioredis");

async function main() {
  const ports = process.argv[2].split(",").map(Number);
  const key = process.argv[3];
  const clients = ports.map(
    (port) => new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 0 }),
  );
  const out = { sg: [], cl: [] };
  for (let n = 0; n < 4; n++) {
    const client = clients[n % clients.length];
    out.sg.push(await client.call("SG.ACQUIRE", `${key}:sg`, 3, 60000));
  }
  // A pipeline: four commands in one write.
  const pipeline = clients[0].pipeline();
  for (let n = 0; n < 4; n++) pipeline.call("CL.THROTTLE", `${key}:cl`, 2, 3, 60);
  for (const [error, reply] of await pipeline.exec()) {
    if (error) throw error;
    out.cl.push(reply);
  }
  try {
    await clients[0].call("NO.SUCH.COMMAND");
  } catch (error) {
    out.unknown = error.message;
  }
  out.after_error = await clients[0].ping();
  console.log(JSON.stringify(out));
  for (const client of clients) client.disconnect();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
