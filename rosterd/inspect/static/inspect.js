// The only script of the inspector: a run that is still open gets its new
// turns without a reload. Every value goes in as text, never as markup.
"use strict";

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.appendChild(td);
  return td;
}

function usd(value) {
  return value === null ? "unknown" : "$" + value.toFixed(6);
}

async function follow(body) {
  const url = body.dataset.live;
  const run = body.dataset.run;
  const rows = document.querySelector("#turns tbody");
  let after = 0;
  for (const row of rows.querySelectorAll("tr[data-turn]")) {
    after = Math.max(after, Number(row.dataset.turn));
  }
  for (;;) {
    await new Promise((done) => setTimeout(done, 1000));
    let update;
    try {
      const response = await fetch(url + "?after=" + after, { credentials: "same-origin" });
      if (!response.ok) continue;
      update = await response.json();
    } catch (error) {
      continue;
    }
    for (const turn of update.turns) {
      const row = document.createElement("tr");
      row.dataset.turn = String(turn.turn);
      const link = document.createElement("a");
      link.href = "/runs/" + encodeURIComponent(run) + "/turns/" + turn.turn;
      link.textContent = String(turn.turn);
      cell(row, "").appendChild(link);
      cell(row, new Date(turn.at * 1000).toISOString());
      cell(row, String(turn.steps));
      cell(row, String(turn.input_tokens));
      cell(row, String(turn.cached_tokens));
      cell(row, String(turn.written_tokens));
      cell(row, String(turn.output_tokens));
      cell(row, turn.verdict || (turn.failed ? "failed" : "-")).className = "verdict";
      cell(row, usd(turn.cost_usd));
      rows.appendChild(row);
      after = Math.max(after, turn.turn);
    }
    document.getElementById("status").textContent = update.status;
    if (update.status !== "open") return;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.body.dataset.live) follow(document.body);
});
