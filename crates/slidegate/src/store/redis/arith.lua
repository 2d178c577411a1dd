-- slidegate: exact integer arithmetic on Lua numbers, for batches and the
-- other algorithms (one sliding-log hit returns before this point).
--
-- Lua numbers are doubles: integers are exact only below 2^53. Times (~2^51
-- µs), limits (up to 10^12) and windows (up to ~2^48 µs) fit, but their
-- products do not, so every product that may be large goes through muldiv.

local TWO53 = 9007199254740992
local LIMB = 16777216 -- 2^24: a product of two limbs stays exact

-- floor(a / d) and a mod d, exact for 0 <= a < 2^53, d >= 1.
local function divmod(a, d)
  local q = math.floor(a / d)
  local r = a - q * d
  while r < 0 do
    q = q - 1
    r = r + d
  end
  while r >= d do
    q = q + 1
    r = r - d
  end
  return q, r
end

-- max(deadline - now, 0)
local function until_(deadline, now)
  if deadline > now then
    return deadline - now
  end
  return 0
end

-- ceil(a / d) for 0 <= a < 2^53.
local function ceil_div(a, d)
  local q, r = divmod(a, d)
  if r > 0 then
    return q + 1
  end
  return q
end

-- The three base-2^24 limbs of 0 <= x < 2^53, lowest first.
local function limbs(x)
  local x0 = x % LIMB
  x = (x - x0) / LIMB
  local x1 = x % LIMB
  return x0, x1, (x - x1) / LIMB
end

-- a*b - c*d exactly, for operands below 2^53 whose result is known to be
-- small (|result| < 2^52): the products are formed limb by limb, their
-- difference is carried from the lowest limb up, and only the small result
-- is ever held in one number.
local function mul_sub(a, b, c, d)
  local a0, a1, a2 = limbs(a)
  local b0, b1, b2 = limbs(b)
  local c0, c1, c2 = limbs(c)
  local d0, d1, d2 = limbs(d)
  local digits = {
    a0 * b0 - c0 * d0,
    a0 * b1 + a1 * b0 - c0 * d1 - c1 * d0,
    a0 * b2 + a1 * b1 + a2 * b0 - c0 * d2 - c1 * d1 - c2 * d0,
    a1 * b2 + a2 * b1 - c1 * d2 - c2 * d1,
    a2 * b2 - c2 * d2,
  }
  local carry = 0
  for k = 1, 5 do
    local v = digits[k] + carry
    local digit = v % LIMB
    digits[k] = digit
    carry = (v - digit) / LIMB
  end
  local value = carry
  for k = 5, 1, -1 do
    value = value * LIMB + digits[k]
  end
  return value
end

-- floor(a * b / d) and (a * b) mod d, exact for 0 <= a, b < 2^53 and
-- 1 <= d < 2^50 whenever the quotient is below 2^53 (every caller bounds it).
local function muldiv(a, b, d)
  local p = a * b
  if p < TWO53 then
    return divmod(p, d)
  end
  -- The float quotient is within a few units of the exact one; the exact
  -- remainder says which way to correct it.
  local q = math.floor(p / d)
  local r = mul_sub(a, b, q, d)
  while r < 0 do
    q = q - 1
    r = r + d
  end
  while r >= d do
    q = q + 1
    r = r - d
  end
  return q, r
end

-- Milliseconds for PEXPIRE so that a key lives at least until `deadline`
-- (µs, same clock as `now`), plus the configured margin; at least 1.
local function ttl_ms(deadline, now, margin)
  local ms = ceil_div(until_(deadline, now), 1000) + margin
  if ms < 1 then
    return 1
  end
  return ms
end

-- Refuses the call: KEYS[index] holds something that is not this version's
-- state (another type, a foreign string). Raised before anything is
-- written; the store answers it as an error naming the key.
local function conflict(index, what)
  error({ err = format('KEYCONFLICT %d %s', index, what) })
end

-- Raises the error a read of KEYS[index] answered: a key conflict when the
-- key holds another type, else as it came (a store failure).
local function refused(index, reply)
  if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
    conflict(index, 'holds another type of value (' .. reply.err .. ')')
  end
  error(reply)
end

-- The value of KEYS[index] for an algorithm whose state is `size` bytes of
-- doubles and the byte 254 (this format's mark), or nil when absent.
local function load_value(index, size, name)
  local value = redis.pcall('GET', KEYS[index])
  if type(value) == 'table' then
    refused(index, value)
  end
  if value and (#value ~= size + 1 or string.byte(value, size + 1) ~= 254) then
    conflict(index, 'holds a string that is not a ' .. name .. ' state of this version')
  end
  return value
end
