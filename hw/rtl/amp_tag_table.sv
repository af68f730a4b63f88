// amp_tag_table: the tag lookup every kernel that keeps per-instance state shares (the RTL twin of
// amp::TagTable). Hand-written and shared by every generated design.
//
// SLOTS entries, each a tag of TW bits (key, state length and the state words that count:
// amp_pkg::TAG_BITS) and a used bit. `tag` is looked up in every used entry at once: `hit`/
// `hit_slot` name the lowest entry holding it (duplicates are allowed), `free_slot` the lowest
// unused one, `full` says there is none. `insert` writes `tag` into `insert_slot` and marks it
// used; `remove` frees `remove_slot`. What a kernel keeps per entry beyond the tag (rows, parts,
// saved inputs) lives in amp_ram, addressed by the slot.
//
// The lookup is a CAM in LUT-RAM, not a comparator per entry: the tag is cut into C chunks of CW
// bits, and each (chunk, slot) pair has a 2**CW x 1 column, read asynchronously at the chunk's
// value; column (c, s) holds a 1 exactly at chunk c of entry s's tag while s is used, else 0, so
// entry s holds `tag` when it is used and all its C columns read 1. An insert writes 1 at the
// tag's chunks in the slot's columns, a remove writes 0 there. Every column is read and written
// at one address (the chunk of `tag`), a single-port 64 x 1 LUT-RAM (RAM64X1S: one LUT6), so the
// table costs about SLOTS * C LUTs for the columns plus the AND trees and priority encoders; its
// flip-flops are the used bits and the scrub counter.
//
// Reset clears the used bits, but LUT-RAM keeps its contents, and stale 1s would give false hits
// once slots are reused. So after a reset the table scrubs: for 2**CW cycles every column is
// addressed by a counter and written 0, and meanwhile `full` is 1 and no hit is reported
// (kernels wait while the table is full; nothing is in it yet).
//
// The rule the kernels keep, since a remove clears the bits at the chunks of the tag in hand:
// `remove` frees the entry of the tag on `tag` (remove_slot holds `tag`: the kernels free an entry
// while its message is in hand); `insert` goes into an unused slot (free_slot, while not full),
// never during the scrub. An insert and a remove in one cycle are fine: on two slots they write
// different columns; on one slot (the same tag, by the rule) the insert wins, as for `used`.
// Simulation stops with an error if the rule is broken (a shadow copy of the tags, simulation
// only, tells).
module amp_tag_table #(
    parameter integer SLOTS = 16,
    parameter integer SB = 4,   // slot bits: 2**SB >= SLOTS, at least 1
    parameter integer TW = 96   // tag bits
) (
    input  wire          ap_clk,
    input  wire          ap_rst_n,
    input  wire [TW-1:0] tag,
    output reg           hit,
    output reg  [SB-1:0] hit_slot,
    output reg  [SB-1:0] free_slot,
    output wire          full,
    input  wire          insert,
    input  wire [SB-1:0] insert_slot,
    input  wire          remove,
    input  wire [SB-1:0] remove_slot
);
  localparam integer CW = 6;                 // chunk bits: a column is 2**CW deep (one LUT6)
  localparam integer C = (TW + CW - 1) / CW;  // chunks
  localparam integer PW = C * CW;            // the tag padded to whole chunks

  reg [SLOTS-1:0] used;
  reg scrub;                 // the columns are being cleared (after a reset)
  reg [CW-1:0] scrub_addr;   // the address cleared this cycle

  wire [PW-1:0] look;  // the tag looked up, inserted or removed, in whole chunks
  assign look[TW-1:0] = tag;
  generate
    if (PW > TW) begin : g_pad
      assign look[PW-1:TW] = {(PW - TW){1'b0}};
    end
  endgenerate

  reg [SLOTS-1:0] we, wbit;  // per slot: its columns are written this cycle, with this bit
  integer k;
  always @* begin
    for (k = 0; k < SLOTS; k = k + 1) begin
      wbit[k] = !scrub && insert && insert_slot == k[SB-1:0];
      we[k] = scrub || wbit[k] || (remove && remove_slot == k[SB-1:0]);
    end
  end

  wire [C*SLOTS-1:0] chunk_bits;  // [c * SLOTS + s]: column (c, s) read at chunk c of `tag`
  genvar c;
  generate
    for (c = 0; c < C; c = c + 1) begin : g_chunk
      wire [CW-1:0] addr = scrub ? scrub_addr : look[c * CW +: CW];
      // the chunk's SLOTS columns as one memory, bit s of a word column (c, s): each bit written
      // on its own (a per-bit write enable, so still a 2**CW x 1 LUT-RAM per column), and one
      // array per chunk keeps the simulator's model small
      reg [SLOTS-1:0] cols [0:(1 << CW) - 1];
      integer s;
      always @(posedge ap_clk) begin
        for (s = 0; s < SLOTS; s = s + 1)
          if (we[s]) cols[addr][s] <= wbit[s];
      end
      assign chunk_bits[c * SLOTS +: SLOTS] = cols[addr];
    end
  endgenerate

  reg [SLOTS-1:0] match;  // the used entries all of whose columns read 1 (none during the scrub)
  integer j;
  always @* begin
    match = scrub ? {SLOTS{1'b0}} : used;
    for (j = 0; j < C; j = j + 1) match = match & chunk_bits[j * SLOTS +: SLOTS];
  end

  assign full = scrub || &used;

  integer i;
  always @* begin
    hit = 1'b0;
    hit_slot = {SB{1'b0}};
    free_slot = {SB{1'b0}};
    for (i = SLOTS - 1; i >= 0; i = i - 1) begin  // the lowest entry wins, as in amp::TagTable
      if (match[i]) begin
        hit = 1'b1;
        hit_slot = i[SB-1:0];
      end
      if (!used[i]) free_slot = i[SB-1:0];
    end
  end

  always @(posedge ap_clk) begin
    if (!ap_rst_n) begin
      used <= {SLOTS{1'b0}};
      scrub <= 1'b1;
      scrub_addr <= {CW{1'b0}};
    end else begin
      if (scrub) begin
        scrub_addr <= scrub_addr + 1'b1;
        if (&scrub_addr) scrub <= 1'b0;
      end
      if (remove) used[remove_slot] <= 1'b0;
      if (insert && !scrub) used[insert_slot] <= 1'b1;  // after the remove: on one slot it wins
    end
  end

`ifndef SYNTHESIS
  // synthesis translate_off
  reg [TW-1:0] shadow [0:SLOTS-1];  // the entries' tags, to check the rule (not synthesised)
  always @(posedge ap_clk) begin
    if (ap_rst_n) begin
      if (remove && used[remove_slot] && shadow[remove_slot] != tag)
        $error("amp_tag_table: remove of slot %0d with another tag in hand (its bits stay set)",
               remove_slot);
      if (insert && used[insert_slot] && !(remove && remove_slot == insert_slot))
        $error("amp_tag_table: insert into used slot %0d", insert_slot);
      if (insert && scrub) $error("amp_tag_table: insert during the scrub after reset (it reads full)");
      if (insert) shadow[insert_slot] <= tag;
    end
  end
  // synthesis translate_on
`endif
endmodule
