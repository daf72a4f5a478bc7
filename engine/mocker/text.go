package mocker

// DefaultText is what a mocker says when the caller has no better text: it
// is tokenized with the served model's tokenizer into Config.Vocabulary so
// outputs read as English, which makes streams easy to eyeball and keeps
// the detokenizer on realistic input.
const DefaultText = ` Once upon a time, in a town beside a wide green river, there lived a clockmaker who
built small machines for the children of the town. Every morning she opened her shop, wound the
great clock above the door, and listened to it tick. One day a boy brought her a robot that could
not remember how to walk. She looked inside, found a gear that had slipped, and set it right. The
robot took one careful step, then another, and then it danced across the floor. The boy laughed,
the clock struck nine, and the whole street came to see. From then on the robot helped in the shop,
sorting springs by size and sweeping up the brass dust at the end of each day.`
